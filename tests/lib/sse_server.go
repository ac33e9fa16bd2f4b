// sse_server.go - the Go twin of sse_server.js for the TLS path's tests:
// net/http over crypto/tls (Go's TLS, inside the executable), a completion
// streamed chunked with one Write and Flush per event (x-test-mode: packed =
// three events a write), the head flushed on its own first; /status/NNN
// answers NNN; x-test-gap-ms: the pause before each write (2 ms).  Built by
// tests/lib/build.mk with Debian's golang-go, once with DWARF and once
// stripped (-ldflags=-s -w).  Run: go-sse-server [-wrap] PORT [CERT KEY]
// (without them: plain HTTP/1.1, bench_tls's baseline; -wrap: each accepted
// connection inside a net.Conn of its own type, as a proxy-protocol or
// metrics wrapper does, so tls.Conn's conn is not a *net.TCPConn).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func sse(v interface{}) string {
	if s, ok := v.(string); ok {
		return "data: " + s + "\n\n"
	}
	b, _ := json.Marshal(v)
	return "data: " + string(b) + "\n\n"
}

func events(n int, text bool) []string {
	id, object := "chatcmpl-test", "chat.completion.chunk"
	if text {
		id, object = "cmpl-test", "text_completion"
	}
	choice := func(content string, finish interface{}) map[string]interface{} {
		if text {
			return map[string]interface{}{"index": 0, "text": content, "finish_reason": finish}
		}
		delta := map[string]interface{}{}
		if finish == nil {
			delta["content"] = content
		}
		return map[string]interface{}{"index": 0, "delta": delta, "finish_reason": finish}
	}
	var ev []string
	if !text {
		ev = append(ev, sse(map[string]interface{}{"id": id, "object": object, "choices": []interface{}{
			map[string]interface{}{"index": 0, "delta": map[string]string{"role": "assistant", "content": ""}}}}))
	}
	for i := 0; i < n; i++ {
		ev = append(ev, sse(map[string]interface{}{"id": id, "object": object,
			"choices": []interface{}{choice(fmt.Sprintf(" tok%d", i), nil)}}))
	}
	ev = append(ev, sse(map[string]interface{}{"id": id, "object": object,
		"choices": []interface{}{choice("", "length")}}))
	ev = append(ev, sse(map[string]interface{}{"id": id, "object": object, "choices": []interface{}{},
		"usage": map[string]int{"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}))
	return append(ev, sse("[DONE]"))
}

func handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rid := r.Header.Get("x-request-id")
	w.Header().Set("x-request-id", rid)
	if strings.HasPrefix(r.URL.Path, "/status/") {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write([]byte(`{"error":{"message":"test error"}}`))
		return
	}
	var req struct {
		MaxTokens int `json:"max_tokens"`
	}
	json.Unmarshal(body, &req)
	if req.MaxTokens == 0 {
		req.MaxTokens = 8
	}
	ev := events(req.MaxTokens, r.URL.Path == "/v1/completions")
	gap, err := strconv.ParseFloat(r.Header.Get("x-test-gap-ms"), 64)
	if err != nil {
		gap = 2
	}
	per := 1
	if r.Header.Get("x-test-mode") == "packed" {
		per = 3
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	f := w.(http.Flusher)
	f.Flush()
	for i := 0; i < len(ev); i += per {
		time.Sleep(time.Duration(gap * float64(time.Millisecond)))
		end := i + per
		if end > len(ev) {
			end = len(ev)
		}
		io.WriteString(w, strings.Join(ev[i:end], ""))
		f.Flush()
	}
}

type wrapped struct{ net.Conn }

type wrapListener struct{ net.Listener }

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &wrapped{c}, nil
}

func main() {
	wrap := len(os.Args) > 1 && os.Args[1] == "-wrap"
	if wrap {
		os.Args = append(os.Args[:1], os.Args[2:]...)
	}
	if len(os.Args) != 2 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go-sse-server [-wrap] PORT [CERT KEY]")
		os.Exit(2)
	}
	srv := &http.Server{Addr: "127.0.0.1:" + os.Args[1], Handler: http.HandlerFunc(handle)}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if wrap {
		ln = wrapListener{ln}
	}
	fmt.Println("listening on " + os.Args[1])
	if len(os.Args) == 2 {
		fmt.Fprintln(os.Stderr, srv.Serve(ln))
	} else {
		fmt.Fprintln(os.Stderr, srv.ServeTLS(ln, os.Args[2], os.Args[3]))
	}
	os.Exit(1)
}
