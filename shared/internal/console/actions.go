package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// operatorPost runs the checks every operator form shares, in this
// order: actions enabled (else 404), the form's origin and CSRF token
// (403), an operator session (401). It writes the refusal and returns
// false.
func (c *Console) operatorPost(w http.ResponseWriter, r *http.Request) bool {
	if c.adminHash == nil {
		c.errorPage(w, r, http.StatusNotFound, "Not found", "Operator actions are disabled: this server has no operator token (admin.token).")
		return false
	}
	if err := c.checkPost(w, r); err != nil {
		c.refusePost(w, r, err)
		return false
	}
	if !c.operator(r) {
		c.logAction(r, slog.LevelWarn, "console_action_unauthorized", slog.String("route", r.Pattern))
		c.errorPage(w, r, http.StatusUnauthorized, "Sign in first", "Operator actions need an operator session: sign in with the operator token.")
		return false
	}
	return true
}

// operatorGet refuses a page only an operator may see: 404 without
// actions, 401 without an operator session. It writes the refusal and
// returns false.
func (c *Console) operatorGet(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case c.adminHash == nil:
		c.errorPage(w, r, http.StatusNotFound, "Not found", "Operator pages are disabled: this server has no operator token (admin.token).")
		return false
	case !c.operator(r):
		c.logAction(r, slog.LevelWarn, "console_action_unauthorized", slog.String("route", r.Pattern))
		c.errorPage(w, r, http.StatusUnauthorized, "Sign in first", "This page needs an operator session: sign in with the operator token.")
		return false
	}
	return true
}

// formReason reads a form's required reason (at most maxReasonLen
// bytes), or writes the 400 and returns false.
func (c *Console) formReason(w http.ResponseWriter, r *http.Request) (string, bool) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	switch {
	case reason == "":
		c.errorPage(w, r, http.StatusBadRequest, "Reason required", "Give a reason: it is recorded with the action.")
		return "", false
	case len(reason) > maxReasonLen:
		c.errorPage(w, r, http.StatusBadRequest, "Reason too long", fmt.Sprintf("The reason must be at most %d bytes.", maxReasonLen))
		return "", false
	}
	return reason, true
}

// actionKey runs the checks of an action on one execution, in this
// order: operatorPost's, the tenant and id (404), a reason (400). It
// returns the key and the reason, or writes the refusal and returns
// false.
func (c *Console) actionKey(w http.ResponseWriter, r *http.Request) (store.Key, string, bool) {
	if !c.operatorPost(w, r) {
		return store.Key{}, "", false
	}
	key, ok := c.executionKey(w, r)
	if !ok {
		return store.Key{}, "", false
	}
	reason, ok := c.formReason(w, r)
	if !ok {
		return store.Key{}, "", false
	}
	return key, reason, true
}

// cancel handles POST /console/executions/{id}/cancel.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	key, reason, ok := c.actionKey(w, r)
	if !ok {
		return
	}
	e, changed, err := c.b.Cancel(r.Context(), key, reason)
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, ErrNotSupported) {
		// A refusal (SUCCEEDED, FAILED, DLQ: engine.ErrNotCancellable) or
		// a lost race: the row says which.
		if cur, gerr := c.b.Status(r.Context(), key); gerr == nil && cur.Status.Terminal() && cur.Status != store.Cancelled {
			c.logAction(r, slog.LevelInfo, "console_cancel_refused", slog.String("tenant", key.TenantID),
				slog.String("execution_id", key.ExecutionID), slog.String("status", string(cur.Status)))
			c.errorPage(w, r, http.StatusConflict, "Cannot cancel",
				fmt.Sprintf("The execution is %s: only executions that have not ended can be cancelled.", cur.Status))
			return
		}
		if errors.Is(err, store.ErrConflict) {
			c.errorPage(w, r, http.StatusConflict, "Changed meanwhile", "The execution changed while it was being cancelled. Reload it and try again.")
			return
		}
	}
	if err != nil {
		c.backendError(w, r, "Cancelling", err)
		return
	}
	done := "already-cancelled"
	switch {
	case changed && e.Status == store.Cancelled:
		done = "cancelled"
	case changed:
		done = "cancel-requested"
	}
	c.logAction(r, slog.LevelInfo, "console_cancel", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
		slog.Bool("changed", changed), slog.String("status", string(e.Status)))
	http.Redirect(w, r, executionURL(key.ExecutionID)+"?done="+done, http.StatusSeeOther)
}

// redrive handles POST /console/executions/{id}/redrive. The form sends
// the version the operator saw (a re-drive of a row that changed since is
// refused) and, for REMOTE_OUTCOME_UNKNOWN, the confirmation that the
// remote worker can make no more effects.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	key, reason, ok := c.actionKey(w, r)
	if !ok {
		return
	}
	opts := engine.RedriveOptions{Reason: reason, ConfirmedNoRemoteEffect: r.PostForm.Get("confirmNoRemoteEffect") == "yes"}
	if v := r.PostForm.Get("version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			c.errorPage(w, r, http.StatusBadRequest, "Bad form", "The form's version is not a positive number.")
			return
		}
		opts.ExpectedVersion = &n
	}
	e, err := c.b.RedriveWith(r.Context(), key, opts)
	var msg string
	switch {
	case err == nil:
		c.logAction(r, slog.LevelInfo, "console_redrive", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
			slog.String("status", string(e.Status)))
		http.Redirect(w, r, executionURL(key.ExecutionID)+"?done=redriven", http.StatusSeeOther)
		return
	case errors.Is(err, engine.ErrRemoteEffectUnconfirmed):
		msg = "The execution's remote worker may still make effects. Confirm that the remote invocation completed, was cancelled or can make no more effects, then re-drive."
	case errors.Is(err, engine.ErrChildrenExpired):
		msg = "The execution failed while collecting its map's outcomes, and some of its children have expired since: it cannot be re-driven. Submit it again."
	case errors.Is(err, engine.ErrNotRedrivable):
		msg = fmt.Sprintf("The execution is %s; only %s and %s executions (and confirmed %s ones) can be re-driven.", e.Status, store.DLQ, store.Failed, store.RemoteOutcomeUnknown)
	case errors.Is(err, engine.ErrVersionMismatch), errors.Is(err, store.ErrConflict):
		msg = "The execution changed since the page was shown. Reload it and try again."
	default:
		c.backendError(w, r, "Re-driving", err)
		return
	}
	c.logAction(r, slog.LevelInfo, "console_redrive_refused", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
		slog.String("status", string(e.Status)))
	c.errorPage(w, r, http.StatusConflict, "Cannot re-drive", msg)
}
