package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// ScheduleRequest is the body of POST /v1/schedules: a schedule starts
// executions of a pipeline at the fire times of a cron spec or interval.
type ScheduleRequest struct {
	PipelineID string `json:"pipelineId"`
	// Spec is a 5-field cron expression ("*/15 * * * *") or a descriptor
	// (@hourly, @daily, @every 15m).
	Spec string `json:"spec"`
	// TimeZone is an IANA time zone (absent: UTC).
	TimeZone string `json:"timeZone,omitempty"`
	// Overlap is SKIP (absent), BUFFER_ONE or ALLOW_ALL.
	Overlap string `json:"overlap,omitempty"`
	// CatchupLimit is how many missed fire times start after an outage
	// besides the newest (absent: 1).
	CatchupLimit *int `json:"catchupLimit,omitempty"`
	// Input is the JSON input of every execution (absent: {}).
	Input json.RawMessage `json:"input,omitempty"`
	// Paused creates the schedule paused.
	Paused bool `json:"paused,omitempty"`
}

// Schedule is a schedule and its progress.
type Schedule struct {
	ScheduleID   string          `json:"scheduleId"`
	PipelineID   string          `json:"pipelineId"`
	Spec         string          `json:"spec"`
	TimeZone     string          `json:"timeZone"`
	Overlap      string          `json:"overlap"`
	CatchupLimit int             `json:"catchupLimit"`
	Input        json.RawMessage `json:"input"`
	Paused       bool            `json:"paused"`
	// NextFireAt is the first fire time not handled yet (absent: the
	// spec fires no more).
	NextFireAt *time.Time `json:"nextFireAt,omitempty"`
	// LastFireAt and LastExecutionID name the newest execution started.
	LastFireAt      *time.Time `json:"lastFireAt,omitempty"`
	LastExecutionID string     `json:"lastExecutionId,omitempty"`
	// PendingFireAt is the fire time BUFFER_ONE keeps for later.
	PendingFireAt *time.Time `json:"pendingFireAt,omitempty"`
	// Fired counts the fire times started; Skipped those the overlap
	// policy or the catch-up limit dropped.
	Fired     int       `json:"fired"`
	Skipped   int       `json:"skipped"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// ScheduleList is the body of GET /v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

func schedulePath(id string) string { return "/v1/schedules/" + url.PathEscape(id) }

// CreateSchedule creates a schedule (an operator route, as Redrive).
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error) {
	if req.PipelineID == "" || req.Spec == "" {
		return Schedule{}, missing("the pipeline id and the spec")
	}
	var s Schedule
	_, err := c.doJSON(ctx, call{method: http.MethodPost, path: "/v1/schedules", operator: true}, req, &s)
	return s, err
}

// Schedules lists the caller's schedules (an operator route).
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var l ScheduleList
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/schedules", operator: true}, nil, &l)
	return l.Schedules, err
}

// Schedule reads one schedule (an operator route).
func (c *Client) Schedule(ctx context.Context, id string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodGet, id, "")
}

// PauseSchedule pauses a schedule (an operator route).
func (c *Client) PauseSchedule(ctx context.Context, id string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, id, "/pause")
}

// ResumeSchedule resumes a paused schedule; the fire times it was paused
// are not caught up (an operator route).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, id, "/resume")
}

// DeleteSchedule deletes a schedule; its executions are not touched (an
// operator route).
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	if id == "" {
		return missing("the schedule id")
	}
	_, err := c.doJSON(ctx, call{method: http.MethodDelete, path: schedulePath(id), operator: true}, nil, nil)
	return err
}

func (c *Client) scheduleCall(ctx context.Context, method, id, suffix string) (Schedule, error) {
	if id == "" {
		return Schedule{}, missing("the schedule id")
	}
	var s Schedule
	_, err := c.doJSON(ctx, call{method: method, path: schedulePath(id) + suffix, operator: true}, nil, &s)
	return s, err
}
