package stack

// The schedules' operator routes (shared/internal/httpapi/schedules.go):
// each its own route, granted by the operator policy only.

// Route ids of the schedules' routes.
const (
	SchedulesCreateRouteID = "SchedulesCreateRoute"
	SchedulesListRouteID   = "SchedulesListRoute"
	ScheduleGetRouteID     = "ScheduleGetRoute"
	ScheduleDeleteRouteID  = "ScheduleDeleteRoute"
	SchedulePauseRouteID   = "SchedulePauseRoute"
	ScheduleResumeRouteID  = "ScheduleResumeRoute"
)

// Route paths of the schedules.
const (
	schedulesPath      = "/v1/schedules"
	schedulePath       = "/v1/schedules/{scheduleId}"
	schedulePausePath  = "/v1/schedules/{scheduleId}/pause"
	scheduleResumePath = "/v1/schedules/{scheduleId}/resume"
)

// scheduleRoutes are the schedules' routes (part of Routes).
var scheduleRoutes = []Route{
	{SchedulesCreateRouteID, "POST", schedulesPath, false, false},
	{SchedulesListRouteID, "GET", schedulesPath, false, false},
	{ScheduleGetRouteID, "GET", schedulePath, false, false},
	{ScheduleDeleteRouteID, "DELETE", schedulePath, false, false},
	{SchedulePauseRouteID, "POST", schedulePausePath, false, false},
	{ScheduleResumeRouteID, "POST", scheduleResumePath, false, false},
}
