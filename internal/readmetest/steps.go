package readmetest

import (
	"fmt"
	"strings"
)

// Step is one command of a README and the output the README shows for it.
type Step struct {
	Line       int    // of the command in the README, from 1
	Command    string // as written, without a trailing " &"
	Background bool   // the line ends with " &": it runs while the next step does
	Output     string // the output shown after the command, "" if none
	HasOutput  bool
}

// Parse returns the steps of the README section under heading (e.g.
// "## Steps"; the section ends at the next heading of that level or
// above). Every line of a ```sh block is a command (blank lines and
// comments are skipped, a trailing \ continues a line); a fenced block of
// any other kind right after a ```sh block is the output of that block's
// last command. Fences may be indented (inside list items): the fence's
// indentation is removed from the block's lines.
func Parse(readme, heading string) ([]Step, error) {
	lines := strings.Split(strings.ReplaceAll(readme, "\r\n", "\n"), "\n")
	level := len(heading) - len(strings.TrimLeft(heading, "#"))
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no %q section", heading)
	}
	var steps []Step
	lastWasSh := false // the previous block was a sh block whose last command has no output yet
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if h := len(l) - len(strings.TrimLeft(l, "#")); h > 0 && h <= level && strings.HasPrefix(l[h:], " ") {
			break
		}
		trimmed := strings.TrimLeft(l, " ")
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		indent := len(l) - len(trimmed)
		info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		body, j := fencedBody(lines, i+1, indent)
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: unterminated code block", i+1)
		}
		switch info {
		case "sh":
			cmds := shSteps(body, i+2)
			steps = append(steps, cmds...)
			n := len(cmds)
			if n == 0 {
				return nil, fmt.Errorf("line %d: a sh block without commands", i+1)
			}
			lastWasSh = true
		default:
			if !lastWasSh {
				return nil, fmt.Errorf("line %d: an output block that does not follow a sh block", i+1)
			}
			s := &steps[len(steps)-1]
			s.Output, s.HasOutput = strings.Join(body, "\n"), true
			lastWasSh = false
		}
		i = j
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("the %q section has no ```sh blocks", heading)
	}
	return steps, nil
}

// fencedBody returns the lines of the code block starting at line i, the
// fence's indentation removed, and the index of its closing fence
// (len(lines) if there is none).
func fencedBody(lines []string, i, indent int) ([]string, int) {
	var body []string
	j := i
	for ; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "```" {
			break
		}
		bl := lines[j]
		for k := 0; k < indent && strings.HasPrefix(bl, " "); k++ {
			bl = bl[1:]
		}
		body = append(body, bl)
	}
	return body, j
}

// shSteps are the commands of a sh block whose first line is line first:
// blank lines and comments skipped, a trailing \ continuing a line, a
// trailing & running the command in the background.
func shSteps(body []string, first int) []Step {
	var steps []Step
	for k := 0; k < len(body); k++ {
		cmd := strings.TrimSpace(body[k])
		at := first + k
		for strings.HasSuffix(cmd, "\\") && k+1 < len(body) {
			k++
			cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(body[k])
		}
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			continue
		}
		s := Step{Line: at, Command: cmd}
		if c, ok := strings.CutSuffix(cmd, " &"); ok {
			s.Command, s.Background = strings.TrimSpace(c), true
		}
		steps = append(steps, s)
	}
	return steps
}
