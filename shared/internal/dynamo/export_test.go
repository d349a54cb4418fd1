package dynamo

import "time"

// Rest is how long StreamFeed.Run rests after a pass that applied n
// records and failed with err (the stream tests' view of its batching).
func (f *StreamFeed) Rest(n int, err error) time.Duration { return f.rest(n, err) }
