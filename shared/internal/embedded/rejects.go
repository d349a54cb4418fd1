package embedded

import (
	"context"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/reject"
)

// Rejects is the embedded Item Reject Sink publisher: each envelope one
// sealed JSON value of bucket rejects, in publish order (the key is the
// bucket's sequence), kept until the janitor drops it after the
// retention.
type Rejects struct{ db *DB }

var _ reject.Publisher = (*Rejects)(nil)

// Rejects returns the reject publisher.
func (db *DB) Rejects() *Rejects { return &Rejects{db: db} }

// Publish implements reject.Publisher; a nil error means the envelope is
// on disk.
func (r *Rejects) Publish(ctx context.Context, env reject.Envelope) error {
	env.RejectedAt = fromMs(ms(env.RejectedAt))
	env.Payload = slices.Clone(env.Payload)
	v, err := sealJSON(env)
	if err != nil {
		return err
	}
	return r.db.update(ctx, func(t *txn) error {
		b := t.bucket(bRejects)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		return b.Put(be64(int64(seq)), v)
	})
}

// Envelopes returns every envelope kept, in publish order.
func (r *Rejects) Envelopes(ctx context.Context) ([]reject.Envelope, error) {
	var out []reject.Envelope
	err := r.db.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bRejects).ForEach(func(k, v []byte) error {
			var env reject.Envelope
			if err := openJSON(v, &env, "reject envelope"); err != nil {
				return err
			}
			out = append(out, env)
			return nil
		})
	})
	return out, err
}
