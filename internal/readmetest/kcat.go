package readmetest

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
)

// kcatCmd is a kcat command line: -P (produce the lines of its input) or
// -C -e (print the records of a topic, then exit).
type kcatCmd struct {
	produce bool
	broker  string
	topic   string
	key     *string
	headers [][2]string
	format  string // -C: -f, default "%s\n"
}

func parseKcat(words []string) (kcatCmd, error) {
	k := kcatCmd{format: `%s\n`}
	mode, exit := "", false
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s needs an argument", w)
			}
			i++
			return words[i], nil
		}
		switch w {
		case "-P", "-C":
			if mode != "" {
				return k, fmt.Errorf("both -P and -C")
			}
			mode = w
		case "-e":
			exit = true
		default:
			if err := k.option(w, arg); err != nil {
				return k, err
			}
		}
	}
	switch {
	case mode == "":
		return k, fmt.Errorf("-P or -C is needed")
	case k.broker == "" || k.topic == "":
		return k, fmt.Errorf("-b and -t are needed")
	case mode == "-C" && !exit:
		return k, fmt.Errorf("-C without -e never ends")
	case mode == "-C" && (k.key != nil || len(k.headers) > 0):
		return k, fmt.Errorf("-k and -H are for -P")
	}
	k.produce = mode == "-P"
	return k, nil
}

// option applies one flag other than -P, -C and -e; arg reads its value.
func (k *kcatCmd) option(w string, arg func() (string, error)) error {
	var err error
	var v string
	switch w {
	case "-b":
		k.broker, err = arg()
	case "-t":
		k.topic, err = arg()
	case "-k":
		v, err = arg()
		k.key = &v
	case "-H":
		v, err = arg()
		name, value, ok := strings.Cut(v, "=")
		if err == nil && !ok {
			err = fmt.Errorf("-H %q: want name=value", v)
		}
		k.headers = append(k.headers, [2]string{name, value})
	case "-f":
		k.format, err = arg()
	case "-o":
		if v, err = arg(); err == nil && v != "beginning" {
			err = fmt.Errorf("-o %s: only beginning is supported", v)
		}
	case "-q":
	default:
		return fmt.Errorf("kcat flag %s is not supported by the test", w)
	}
	return err
}

func (r *runner) checkBroker(addr string) error {
	if addr != r.kafka {
		return fmt.Errorf("broker %s: the README's Kafka is %s", addr, KafkaAddr)
	}
	return nil
}

// produce writes each line of input as a record, as kcat -P does, and
// waits for the acknowledgements.
func (r *runner) produce(ctx context.Context, k kcatCmd, input string) (output, error) {
	if err := r.checkBroker(k.broker); err != nil {
		return output{}, err
	}
	p, err := r.kafkaProducer()
	if err != nil {
		return output{}, err
	}
	var hs []kafka.Header
	for _, h := range k.headers {
		hs = append(hs, kafka.Header{Key: h[0], Value: []byte(h[1])})
	}
	done := make(chan kafka.Event, 16)
	n := 0
	for _, line := range strings.Split(strings.TrimSuffix(input, "\n"), "\n") {
		if line == "" {
			continue
		}
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &k.topic, Partition: kafka.PartitionAny}, Value: []byte(line), Headers: hs}
		if k.key != nil {
			m.Key = []byte(*k.key)
		}
		if err := p.Produce(m, done); err != nil {
			return output{}, err
		}
		n++
	}
	for ; n > 0; n-- {
		select {
		case ev := <-done:
			if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
				return output{}, m.TopicPartition.Error
			}
		case <-ctx.Done():
			return output{}, fmt.Errorf("no acknowledgement: %w", ctx.Err())
		}
	}
	return output{}, nil
}

// consume prints every record of the topic, from the beginning to the end
// as it is when the command starts, as kcat -C -e does (partition after
// partition; the examples' topics have one).
func (r *runner) consume(ctx context.Context, k kcatCmd) (output, error) {
	if err := r.checkBroker(k.broker); err != nil {
		return output{}, err
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": r.kafka, "group.id": "readmetest-" + uuid.NewString(), "enable.auto.commit": false,
		"auto.offset.reset": "earliest", "log_level": 3, "fetch.wait.max.ms": 10,
	})
	if err != nil {
		return output{}, err
	}
	defer c.Close()
	timeoutMs := func() int {
		if d, ok := ctx.Deadline(); ok {
			return max(1, int(time.Until(d)/time.Millisecond))
		}
		return 10000
	}
	md, err := c.GetMetadata(&k.topic, false, timeoutMs())
	if err != nil {
		return output{}, err
	}
	tm, ok := md.Topics[k.topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return output{}, fmt.Errorf("topic %s: %v", k.topic, tm.Error)
	}
	var b strings.Builder
	for _, pm := range tm.Partitions {
		_, high, err := c.QueryWatermarkOffsets(k.topic, pm.ID, timeoutMs())
		if err != nil {
			return output{}, err
		}
		if high == 0 {
			continue
		}
		if err := c.Assign([]kafka.TopicPartition{{Topic: &k.topic, Partition: pm.ID, Offset: kafka.OffsetBeginning}}); err != nil {
			return output{}, err
		}
		for next := int64(0); next < high; {
			if ctx.Err() != nil {
				return output{}, fmt.Errorf("reading %s [%d] up to offset %d: %w", k.topic, pm.ID, high, ctx.Err())
			}
			ev := c.Poll(100)
			m, ok := ev.(*kafka.Message)
			if !ok || m.TopicPartition.Error != nil {
				continue
			}
			next = int64(m.TopicPartition.Offset) + 1
			b.WriteString(kcatFormat(k.format, m))
		}
	}
	return output{text: b.String(), compare: func(want string, vars Vars) (bool, string) {
		return Match(strings.TrimRight(want, "\n"), strings.TrimRight(b.String(), "\n"), vars), ""
	}}, nil
}

// kcatFormat renders a record with kcat's -f tokens: %s value, %k key, %t
// topic, %p partition, %o offset, %h headers (name=value,...), %S and %K
// the value's and key's sizes; \n \t \\ escapes.
func kcatFormat(f string, m *kafka.Message) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if i+1 < len(f) && (c == '%' || c == '\\') {
			i++
			switch string([]byte{c, f[i]}) {
			case "%s":
				b.Write(m.Value)
			case "%k":
				b.Write(m.Key)
			case "%t":
				b.WriteString(*m.TopicPartition.Topic)
			case "%p":
				b.WriteString(strconv.Itoa(int(m.TopicPartition.Partition)))
			case "%o":
				b.WriteString(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))
			case "%S":
				b.WriteString(strconv.Itoa(len(m.Value)))
			case "%K":
				b.WriteString(strconv.Itoa(len(m.Key)))
			case "%h":
				for j, h := range m.Headers {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteString(h.Key + "=" + string(h.Value))
				}
			case `\n`:
				b.WriteByte('\n')
			case `\t`:
				b.WriteByte('\t')
			case `\\`:
				b.WriteByte('\\')
			case "%%":
				b.WriteByte('%')
			default:
				b.WriteByte(c)
				b.WriteByte(f[i])
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Printf renders a printf format without arguments as the shell's printf
// does: \NNN octal escapes (one to three digits), \\ \" \a \b \f \n \r \t
// \v, and %% (any other % needs an argument and is refused).
func Printf(f string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '%':
			if i+1 < len(f) && f[i+1] == '%' {
				out = append(out, '%')
				i++
				continue
			}
			return nil, fmt.Errorf("printf: %% directives need arguments")
		case c == '\\' && i+1 < len(f):
			i++
			e := f[i]
			if e >= '0' && e <= '7' {
				v, n := 0, 0
				for ; n < 3 && i < len(f) && f[i] >= '0' && f[i] <= '7'; n++ {
					v = v*8 + int(f[i]-'0')
					i++
				}
				i--
				out = append(out, byte(v))
				continue
			}
			esc, ok := map[byte]byte{'\\': '\\', '"': '"', 'a': 7, 'b': 8, 'f': 12, 'n': '\n', 'r': '\r', 't': '\t', 'v': 11}[e]
			if !ok {
				return nil, fmt.Errorf(`printf: \%c is not supported`, e)
			}
			out = append(out, esc)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// base64Lines is base64's output: the standard alphabet, padded, lines of
// 76 characters.
func base64Lines(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 76 {
		out.WriteString(s[:76] + "\n")
		s = s[76:]
	}
	out.WriteString(s + "\n")
	return out.String()
}
