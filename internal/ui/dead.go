package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/deadletter"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// deadLive streams the dead letters: those there are, then each new one.
func (u *Server) deadLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	msgs, errs, stop, err := bus.Follow(ctx, u.js, []string{events.StreamDead}, "jetloop.dead.>", bus.Start{New: true})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow %s: %v", events.StreamDead, err)
		return
	}
	defer stop()
	letters, err := deadletter.List(ctx, u.dead)
	if err != nil {
		uiError(w, http.StatusBadGateway, "%v", err)
		return
	}
	if letters == nil {
		letters = []deadletter.Letter{} // null would be no list to the page
	}
	s := startSSE(w)
	if s.send("letters", letters) != nil {
		return
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		case <-ping.C:
			if s.ping() != nil {
				return
			}
		case m := <-msgs:
			l := deadletter.Of(m.RawStreamMsg)
			if s.send("letters", []deadletter.Letter{l}) != nil {
				return
			}
		}
	}
}

// deadLetter is a dead letter as its page shows it.
type deadLetter struct {
	deadletter.Letter
	Headers map[string][]string `json:"headers"`
	Payload string              `json:"payload"`
}

func (u *Server) deadShow(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		uiError(w, http.StatusBadRequest, "not a sequence number: %q", r.PathValue("seq"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	m, err := u.dead.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		uiError(w, http.StatusNotFound, "no dead letter %d", seq)
		return
	}
	if err != nil {
		uiError(w, http.StatusBadGateway, "dead letter %d: %v", seq, err)
		return
	}
	writeJSON(w, http.StatusOK, deadLetter{Letter: deadletter.Of(m), Headers: m.Header, Payload: string(m.Data)})
}

// deadRetry is `jetloop dead retry SEQ`.
func (u *Server) deadRetry(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		uiError(w, http.StatusBadRequest, "not a sequence number: %q", r.PathValue("seq"))
		return
	}
	if !u.canSubmit.Load() {
		uiError(w, http.StatusForbidden, "these NATS credentials may not re-send messages (read only)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	res, err := deadletter.Resend(ctx, u.js, u.dead, seq, nil)
	if err != nil {
		uiError(w, http.StatusConflict, "%v", err)
		return
	}
	out := struct {
		deadletter.Resent
		Removed bool   `json:"removed"`
		Note    string `json:"note,omitempty"`
	}{Resent: res, Removed: res.DeleteErr == nil}
	if res.DeleteErr != nil {
		out.Note = fmt.Sprintf("re-sent, but still listed: removing it takes the admin user (%v)", res.DeleteErr)
	}
	writeJSON(w, http.StatusOK, out)
}
