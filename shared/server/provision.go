package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/schema"
)

// provisionCmd creates the tables and queues of package schema, then
// prints the environment that points `qasync serve` at them.
//
//	qasync provision [config flags] [PREFIX]
//
// Without PREFIX the tables are named by the dynamo.* keys and the queues
// qasync-work, qasync-work-poison, qasync-dlq and qasync-item-rejects; with it, everything is
// named PREFIX-executions, PREFIX-work and so on.
func provisionCmd(args []string) int {
	cfg, rest, err := config.Load(os.LookupEnv, args)
	if err == nil && len(rest) > 1 {
		err = fmt.Errorf("at most one name prefix, got %q", rest)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync provision: %v\n", err)
		return 2
	}
	names := schema.DefaultNames
	names.ExecutionTable, names.PayloadTable, names.DeadLetterTable = cfg.ExecutionTable, cfg.PayloadTable, cfg.DeadLetterTable
	names.EffectTable, names.HistoryTable = cfg.EffectTable, cfg.HistoryTable
	if len(rest) == 1 {
		names = schema.Prefixed(rest[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	clients, err := awsclient.Load(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync provision: %v\n", err)
		return 1
	}
	created, err := provision.CreateTables(ctx, clients.DynamoDB, schema.Tables(names))
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync provision: %v\n", err)
		return 1
	}
	urls, err := provision.CreateQueues(ctx, clients.SQS, schema.Queues(names))
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync provision: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "tables created: %v (others existed)\n", created)
	fmt.Printf("export %s=dynamo\n", config.EnvName(config.KeyPrefix+"state-provider"))
	fmt.Printf("export %s=sqs\n", config.EnvName(config.KeyPrefix+"dispatcher-provider"))
	fmt.Printf("export %s=sqs\n", config.EnvName(config.KeyPrefix+"dlq-provider"))
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"queue-url"), urls[names.WorkQueue])
	fmt.Printf("export %s=%s\n", config.EnvName(config.FullKey("queue.urgent-url")), urls[names.UrgentQueue])
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dlq-url"), urls[names.DLQQueue])
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dynamo.execution-table"), names.ExecutionTable)
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dynamo.execution-payload-table"), names.PayloadTable)
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dynamo.dead-letter-table"), names.DeadLetterTable)
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dynamo.effect-table"), names.EffectTable)
	fmt.Printf("export %s=%s\n", config.EnvName(config.KeyPrefix+"dynamo.history-table"), names.HistoryTable)
	fmt.Printf("export %s=sqs\n", config.EnvName(config.FullKey("item-reject.provider")))
	fmt.Printf("export %s=%s\n", config.EnvName(config.FullKey("item-reject.queue-url")), urls[names.RejectQueue])
	return 0
}
