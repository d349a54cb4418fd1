package embedded

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/store"
)

// listScan bounds the index entries one List call reads: a page may then
// hold fewer executions than asked (filters dropped rows) and still have
// a cursor, as store.ListQuery allows.
const listScan = 5000

var _ store.Lister = (*State)(nil)

// List implements store.Lister with the rules of package store that every
// provider applies (ListQuery.Validate, Fingerprint, CreatedRange,
// Matches, PageSize): the tenant's live rows matching q, newest first
// (creation time to the millisecond descending, then execution id
// descending, the order of the memory provider), read from the list index
// (written once at create) backwards from the cursor's position. A cursor
// of another query is store.ErrInvalidCursor.
func (s *State) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if err := q.Validate(); err != nil {
		return store.ListPage{}, err
	}
	fp := q.Fingerprint()
	tk := tenantKey(q.TenantID)
	var after *listPos
	if q.Cursor != "" {
		pos, err := decodeListCursor(q.Cursor, fp)
		if err != nil {
			return store.ListPage{}, err
		}
		after = &pos
	}
	from, to, empty := q.CreatedRange() // creation ms, inclusive
	if empty {
		return store.ListPage{}, nil
	}
	// start is the first key past the scan's end; the scan reads the keys
	// before it.
	var start []byte
	switch {
	case after != nil:
		start = append(append(slices.Clone(tk), be64(after.At)...), after.ID...)
	case to == math.MaxInt64:
		start = append(slices.Clone(tk), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	default:
		start = append(slices.Clone(tk), be64(to+1)...)
	}
	limit := q.PageSize()
	var page store.ListPage
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		now := s.clock.Now()
		c := tx.Bucket(bList).Cursor()
		k, _ := c.Seek(start)
		if k == nil {
			k, _ = c.Last()
		}
		for k != nil && bytes.Compare(k, start) >= 0 {
			k, _ = c.Prev()
		}
		var last listPos // the last entry read
		for scanned := 0; k != nil && bytes.HasPrefix(k, tk) && len(k) >= len(tk)+8; k, _ = c.Prev() {
			at := int64(binary.BigEndian.Uint64(k[len(tk):]))
			if at < from {
				return nil
			}
			if scanned == listScan {
				page.Cursor = encodeListCursor(fp, last) // cut short: go on from here
				return nil
			}
			scanned++
			last = listPos{At: at, ID: string(k[len(tk)+8:])}
			if at > to {
				continue // a cursor's position past the range (cannot happen: the cursor is this query's)
			}
			row, ok, err := s.live(tx, execKey(store.Key{TenantID: q.TenantID, ExecutionID: last.ID}), now)
			if err != nil {
				return err
			}
			if !ok || !q.Matches(&row) {
				continue
			}
			if len(page.Executions) == limit {
				// One more match: the page is not the last.
				e := page.Executions[limit-1]
				page.Cursor = encodeListCursor(fp, listPos{At: e.CreatedAt.UnixMilli(), ID: e.ExecutionID})
				return nil
			}
			page.Executions = append(page.Executions, row)
		}
		return nil
	})
	if err != nil {
		return store.ListPage{}, err
	}
	return page, nil
}

// listPos is a place in a tenant's list: a creation time and an id; the
// next page starts with the entry before it.
type listPos struct {
	At int64  `json:"c"`
	ID string `json:"e"`
}

type listCursor struct {
	Query string  `json:"q"`
	After listPos `json:"a"`
}

func encodeListCursor(query string, after listPos) string {
	b, _ := json.Marshal(listCursor{Query: query, After: after}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeListCursor(c, query string) (listPos, error) {
	var cur listCursor
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		err = json.Unmarshal(b, &cur)
	}
	if err != nil || cur.Query != query || cur.After.ID == "" {
		return listPos{}, fmt.Errorf("embedded: %w: not a cursor of this list query", store.ErrInvalidCursor)
	}
	return cur.After, nil
}
