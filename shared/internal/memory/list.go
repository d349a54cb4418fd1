package memory

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/qasync/qasync/shared/store"
)

// List implements store.Lister: the tenant's live rows matching q, newest
// first (CreatedAt to the millisecond descending, then execution id
// descending, so that rows created in the same millisecond have one
// order), continuing after the cursor's row. Like every provider it
// refuses another query's cursor with store.ErrInvalidCursor.
func (s *StateStore) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return store.ListPage{}, err
	}
	if err := q.Validate(); err != nil {
		return store.ListPage{}, err
	}
	after, err := decodeListCursor(q.Cursor, q.Fingerprint())
	if err != nil {
		return store.ListPage{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	var rows []store.Execution
	for k := range s.rows {
		if k.TenantID != q.TenantID {
			continue
		}
		row := s.live(k, now)
		if row == nil || !q.Matches(row) || (after != nil && !listLess(*after, listPos{row.CreatedAt.UnixMilli(), row.ExecutionID})) {
			continue
		}
		rows = append(rows, clone(*row))
	}
	s.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		return listLess(listPos{rows[i].CreatedAt.UnixMilli(), rows[i].ExecutionID}, listPos{rows[j].CreatedAt.UnixMilli(), rows[j].ExecutionID})
	})
	limit := q.PageSize()
	if len(rows) <= limit {
		return store.ListPage{Executions: rows}, nil
	}
	rows = rows[:limit]
	last := rows[len(rows)-1]
	return store.ListPage{Executions: rows, Cursor: encodeListCursor(q.Fingerprint(), listPos{last.CreatedAt.UnixMilli(), last.ExecutionID})}, nil
}

// listPos is a row's place in a list: newest first, then by id.
type listPos struct {
	At int64  `json:"c"`
	ID string `json:"e"`
}

// listLess reports whether a comes before b in a list.
func listLess(a, b listPos) bool {
	if a.At != b.At {
		return a.At > b.At
	}
	return a.ID > b.ID
}

// listCursor is a page's continuation: the query it belongs to and the
// last row returned.
type listCursor struct {
	Query string  `json:"q"`
	After listPos `json:"a"`
}

func encodeListCursor(query string, after listPos) string {
	b, _ := json.Marshal(listCursor{Query: query, After: after}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeListCursor(c, query string) (*listPos, error) {
	if c == "" {
		return nil, nil
	}
	var cur listCursor
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		err = json.Unmarshal(b, &cur)
	}
	if err != nil || cur.Query != query || cur.After.ID == "" {
		return nil, fmt.Errorf("memory: %w: not a cursor of this list query", store.ErrInvalidCursor)
	}
	return &cur.After, nil
}
