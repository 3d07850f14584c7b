package stack

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/admin"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// checkKafka checks, for every kafka binding, that its cluster accepts the
// connection (TLS, SASL). Until it does, the readiness condition "kafka NAME
// connection" fails with the named cause (kafkaio.ErrAuthentication,
// kafkaio.ErrTLS, kafkaio.ErrNoBroker), and each new cause is logged as an
// error: wrong credentials or an untrusted certificate need the operator,
// and the long-lived clients alone would only say that no broker answers.
func checkKafka(ctx context.Context, cfg *config.Config, readiness *admin.Readiness, logger *slog.Logger, wg *sync.WaitGroup) {
	for name, k := range cfg.Kafka {
		cond := "kafka " + name + " connection"
		readiness.Set(cond, false, "connecting")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var logged error // the cause last logged
			_ = kafkaio.CheckConnection(ctx, kafkaio.CheckOptions{
				Name: name, Properties: k.Properties, KafkaTimeout: cfg.Limits.KafkaTimeout,
				Report: func(err error) {
					if err == nil {
						readiness.Set(cond, true, "")
						if logged != nil {
							logger.Info("kafka cluster answers", "kafka", name)
						}
						return
					}
					readiness.Set(cond, false, err.Error())
					var ce *kafkaio.ConnectError
					if errors.As(err, &ce) && !errors.Is(logged, ce.Cause) {
						logged = ce.Cause
						logger.Error("kafka cluster refuses or does not answer", "kafka", name, "cause", ce.Cause.Error(), "err", err)
					}
				},
			})
		}()
	}
}
