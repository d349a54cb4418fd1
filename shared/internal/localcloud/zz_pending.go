package localcloud

import (
	"time"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

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

// Route is one route (pending merge).
type Route struct {
	Key           string
	Authorization string
	Function      string
}

// Caller is pending merge.
type Caller struct {
	AccessKeyID, SecretAccessKey string
	ARN                          string
	Policy                       *iamcheck.Policy
}
