// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"
)

// Handler serves the API of p.
func Handler(p Provider) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+Version+"/gateway", func(w http.ResponseWriter, _ *http.Request) {
		s, err := p.Status()
		reply(w, s, err)
	})
	mux.HandleFunc("GET /"+Version+"/gateway/policies", func(w http.ResponseWriter, _ *http.Request) {
		ps, err := p.Policies()
		reply(w, ps, err)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, Error{Error: "no such endpoint " + r.Method + " " + r.URL.Path + " (API " + Version + ": GET /" + Version + "/gateway, GET /" + Version + "/gateway/policies)"})
	})
	return mux
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, Error{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Serve serves h on l until ctx ends, within DefaultLimits.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := newServer(h)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err := serveLimited(srv, l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
