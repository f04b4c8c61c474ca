// Command apiproxy stands between clients and a hybox server during an
// end-to-end run and checks every response against the protocol document:
// it reverse-proxies (streams and WebSocket upgrades included) from -listen
// to -target, records each exchange, and on SIGTERM or SIGINT validates
// them all (sdks/apitest), writes the mismatches to standard error and
// exits 1 when there is any (0 otherwise). It is a test tool: the
// official SDK suites in e2e/ run through it, so their real traffic is held
// to the document too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/sdks"
	"github.com/hybox-dev/hybox/sdks/apitest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	target := flag.String("target", "", "the hybox server, http://host:port")
	addrFile := flag.String("addr-file", "", "write the address listened on to this file")
	flag.Parse()
	if err := run(*listen, *target, *addrFile); err != nil {
		log.Printf("apiproxy: %v", err)
		os.Exit(1)
	}
}

func run(listen, target, addrFile string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-target %q is not http://host:port", target)
	}
	spec, err := apitest.Load(sdks.OpenAPI)
	if err != nil {
		return fmt.Errorf("the protocol document: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	orig := rp.Director
	rp.Director = func(r *http.Request) {
		host := r.Host
		orig(r)
		r.Host = host // endpoints the server returns keep pointing here
	}
	// Full duplex: the server may answer (a stream starts) before the
	// request body is through, and without it net/http closes that body
	// when the answer starts, which breaks the upstream mid-stream.
	duplex := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
	rec := apitest.Record(duplex)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sigs:
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)

	exchanges := rec.Exchanges()
	bad := 0
	for _, ex := range exchanges {
		for _, m := range spec.Validate(ex) {
			bad++
			fmt.Fprintf(os.Stderr, "apiproxy: %s\n", m)
		}
	}
	fmt.Fprintf(os.Stderr, "apiproxy: %d responses checked against sdks/openapi.yaml, %d mismatches\n", len(exchanges), bad)
	if bad > 0 {
		return fmt.Errorf("%d responses do not match the protocol document", bad)
	}
	return nil
}
