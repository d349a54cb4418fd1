package localcloud

import "time"

// StreamMapping is a DynamoDB stream event source mapping (pending merge).
type StreamMapping struct {
	Function                string
	Table                   string
	BatchSize               int
	BatchingWindow          time.Duration
	ReportBatchItemFailures bool
	BisectOnError           bool
	MaxRetryAttempts        int
	OnFailureQueueURL       string
	StartingPosition        string
}

