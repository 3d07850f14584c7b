package readmetest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ShellWords splits a command line into words as a POSIX shell would for
// the lines READMEs show: blanks separate words; single quotes quote
// everything; double quotes quote, with \" \\ \$ and \` the only escapes
// (an unescaped $ or ` is refused: no expansion is done); outside quotes a
// backslash escapes the next character; a word starting with # ends the line.
// A | or & standing alone is a word of its own (pipes and background jobs
// are the caller's to interpret); other shell syntax is refused.
func ShellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'' || ch == '"':
			end, err := quoted(line, i, &cur)
			if err != nil {
				return nil, err
			}
			i = end
			in = true
		case ch == '\\':
			if i+1 >= len(line) {
				return nil, fmt.Errorf("a backslash ends the line")
			}
			i++
			cur.WriteByte(line[i])
			in = true
		case ch == ' ' || ch == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case ch == '#' && !in:
			return words, nil
		case ch == '|' || ch == '&':
			if in || (i+1 < len(line) && line[i+1] != ' ' && line[i+1] != '\t') {
				return nil, fmt.Errorf("unquoted %c must stand alone between blanks", ch)
			}
			words = append(words, string(ch))
		case strings.IndexByte("$`;<>()", ch) >= 0:
			return nil, fmt.Errorf("unquoted %c: the line must be a simple command (quote it)", ch)
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// quoted writes the quoted text of line starting at its opening quote i to
// cur, and returns the index of the closing quote.
func quoted(line string, i int, cur *strings.Builder) (int, error) {
	if line[i] == '"' {
		return doubleQuoted(line, i+1, cur)
	}
	j := strings.IndexByte(line[i+1:], '\'')
	if j < 0 {
		return 0, fmt.Errorf("unterminated single quote")
	}
	cur.WriteString(line[i+1 : i+1+j])
	return i + j + 1, nil
}

// doubleQuoted writes the double-quoted text of line starting at i (after
// the opening quote) to cur, and returns the index of the closing quote.
func doubleQuoted(line string, i int, cur *strings.Builder) (int, error) {
	for ; i < len(line) && line[i] != '"'; i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
			i++
			cur.WriteByte(line[i])
		case c == '$' || c == '`':
			return 0, fmt.Errorf("%c in double quotes: expansions are not supported", c)
		default:
			cur.WriteByte(c)
		}
	}
	if i >= len(line) {
		return 0, fmt.Errorf("unterminated double quote")
	}
	return i, nil
}

// Curl is one curl command line: the parts a test can replay.
type Curl struct {
	Line    string
	Method  string
	URL     string
	Headers [][2]string // in order, as given
	Body    string
	HasBody bool // -d or --data-binary given (the body may be empty)
	Include bool // -i: the output starts with the status line and headers
	// MaxTime (-m, --max-time) ends the transfer after that long, keeping
	// what came: how a README shows a stream that never ends (curl -N).
	MaxTime time.Duration
}

// ParseCurl reads the curl options READMEs use: -i, -s, -N, -m, -X, -H, -d
// and --data-binary, and one http:// URL.
func ParseCurl(line string) (Curl, error) {
	words, err := ShellWords(line)
	if err != nil {
		return Curl{}, err
	}
	return parseCurlWords(line, words)
}

func parseCurlWords(line string, words []string) (Curl, error) {
	c := Curl{Line: line}
	if len(words) == 0 || words[0] != "curl" {
		return c, fmt.Errorf("not a curl command")
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s needs an argument", w)
			}
			i++
			return words[i], nil
		}
		if err := c.option(w, arg); err != nil {
			return c, err
		}
	}
	if c.URL == "" {
		return c, fmt.Errorf("no URL")
	}
	if c.Method == "" {
		c.Method = http.MethodGet
		if c.HasBody {
			c.Method = http.MethodPost // as curl does
		}
	}
	return c, nil
}

// option applies one word of a curl command line; arg reads its value.
func (c *Curl) option(w string, arg func() (string, error)) error {
	var err error
	switch w {
	case "-i", "--include", "-is", "-si":
		c.Include = true
	case "-s", "--silent", "-N", "--no-buffer":
		// net/http hands the body over as it comes, as -N makes curl print it.
	case "-m", "--max-time":
		c.MaxTime, err = seconds(w, arg)
	case "-X", "--request":
		c.Method, err = arg()
	case "-H", "--header":
		err = c.header(arg)
	case "-d", "--data", "--data-binary":
		if c.Body, err = arg(); err != nil {
			return err
		}
		if strings.HasPrefix(c.Body, "@") {
			return fmt.Errorf("%s @file is not supported", w)
		}
		c.HasBody = true
	default:
		if !strings.HasPrefix(w, "http://") {
			return fmt.Errorf("unexpected curl argument %q", w)
		}
		if c.URL != "" {
			return fmt.Errorf("two URLs")
		}
		c.URL = w
	}
	return err
}

// header reads the argument of -H, name: value.
func (c *Curl) header(arg func() (string, error)) error {
	h, err := arg()
	if err != nil {
		return err
	}
	name, value, ok := strings.Cut(h, ":")
	if !ok {
		return fmt.Errorf("header %q has no ':'", h)
	}
	c.Headers = append(c.Headers, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}

// seconds reads the argument of option w, a positive number of seconds.
func seconds(w string, arg func() (string, error)) (time.Duration, error) {
	v, err := arg()
	if err != nil {
		return 0, err
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 {
		return 0, fmt.Errorf("%s %q is not a number of seconds", w, v)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Header returns the value of the first header named name (any case).
func (c Curl) Header(name string) (string, bool) {
	for _, h := range c.Headers {
		if strings.EqualFold(h[0], name) {
			return h[1], true
		}
	}
	return "", false
}
