package sqsbackend

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// deleteBatch is SQS's most entries per DeleteMessageBatch.
const deleteBatch = 10

// deleter acknowledges a Poller's handled messages off the handlers'
// slots: add queues a receipt handle and returns, and one goroutine sends
// the queued ones, a DeleteMessage for one, a DeleteMessageBatch for up
// to 10. Under load, the handlers that finish while a delete is in
// flight share the next request (a few SQS requests where there were as
// many as messages); alone, a message is deleted at once. Its queue holds
// as many receipts as the poller has slots: if SQS stops answering, add
// blocks, and with it the handlers' slots, rather than pile up deletes.
//
// A failed delete is logged (delete_failed, warn) and not retried: the
// message comes back when its visibility timeout ends, a duplicate the
// handler tells apart (it finds its transition committed).
type deleter struct {
	client   *sqs.Client
	queueURL string
	in       chan deletion
	done     chan struct{}
}

// deletion is one message to delete and the logger of its handler.
type deletion struct {
	receipt *string
	log     *slog.Logger
}

// newDeleter starts a deleter whose queue holds capacity receipts.
func newDeleter(client *sqs.Client, queueURL string, capacity int) *deleter {
	d := &deleter{client: client, queueURL: queueURL, in: make(chan deletion, max(capacity, 1)), done: make(chan struct{})}
	go d.run()
	return d
}

// add queues the message with receipt handle receipt for deletion.
func (d *deleter) add(receipt *string, log *slog.Logger) {
	d.in <- deletion{receipt: receipt, log: log}
}

// close deletes what is queued and stops; add must not be called after.
func (d *deleter) close() {
	close(d.in)
	<-d.done
}

func (d *deleter) run() {
	defer close(d.done)
	for first := range d.in {
		batch := []deletion{first}
	more:
		for len(batch) < deleteBatch {
			select {
			case x, ok := <-d.in:
				if !ok {
					break more
				}
				batch = append(batch, x)
			default:
				break more
			}
		}
		d.send(batch)
	}
}

// send deletes one batch: DeleteMessage for a single message,
// DeleteMessageBatch for more.
func (d *deleter) send(batch []deletion) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	failed := func(x deletion, msg string) {
		x.log.LogAttrs(ctx, slog.LevelWarn, "delete_failed", slog.String("event", "delete_failed"), slog.String("error", msg))
	}
	if len(batch) == 1 {
		if _, err := d.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(d.queueURL), ReceiptHandle: batch[0].receipt}); err != nil {
			failed(batch[0], err.Error())
		}
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
	for i, x := range batch {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: x.receipt}
	}
	out, err := d.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(d.queueURL), Entries: entries})
	if err != nil {
		for _, x := range batch {
			failed(x, err.Error())
		}
		return
	}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(batch) {
			failed(batch[i], aws.ToString(f.Code)+": "+aws.ToString(f.Message))
		}
	}
}
