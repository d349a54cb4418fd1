package wiring

import (
	"log/slog"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/dynamo"
)

// HistoryFeed returns the stream poller that reads the execution table's
// stream into the history table, as the history Lambda function's event
// source mapping does in AWS: with state-provider dynamo and
// history.stream-poller on (qasync serve runs it until shutdown);
// otherwise nil (the memory store records its history itself).
func (s *Set) HistoryFeed(c config.Config, log *slog.Logger) (*dynamo.StreamFeed, error) {
	if s.History == nil || !c.HistoryStreamPoller || s.Clients == nil {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return dynamo.NewStreamFeed(s.Clients.DynamoDBStreams, s.Clients.DynamoDB, s.History, dynamo.StreamOptions{
		ExecutionTable: c.ExecutionTable, Interval: c.HistoryPollInterval, Logger: log,
	})
}
