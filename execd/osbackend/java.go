package osbackend

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hybox-dev/hybox/execd"
)

// Java code contexts run JShellDriver.java: a JShell (jdk.jshell) with the
// local execution engine in one JVM per context, speaking the framing of
// the python driver (internal/pydriver), so interpreter (interp.go) drives
// it as it drives python and node. SIGINT stops a running snippet
// (JShell.stop) and keeps the context.

// javaDriver is the driver's source.
//
//go:embed JShellDriver.java
var javaDriver string

// javaDriverClass is the driver's class name.
const javaDriverClass = "JShellDriver"

// javaAvailable reports whether java contexts can start: java and the
// JDK's jshell (which comes with the jdk.jshell module) are installed.
func (b *Executor) javaAvailable() bool {
	if _, err := b.lookPath(b.opts.Java); err != nil {
		return false
	}
	_, err := b.lookPath(b.opts.JShell)
	return err == nil
}

// javaArgs returns the java command line of a driver. The driver is
// written to a private directory and compiled with javac once per Executor
// (a compiled driver starts in about 1.1-2.0 s, the source launcher in
// 2.3-3.1 s, which compiles it at every start); when javac fails the
// source launcher runs it.
func (b *Executor) javaArgs(ctx context.Context) ([]string, error) {
	b.javaMu.Lock()
	defer b.javaMu.Unlock()
	if b.javaDir == "" {
		dir, err := os.MkdirTemp("", "hybox-java-")
		if err != nil {
			return nil, fmt.Errorf("osbackend: java driver dir: %w", err)
		}
		src := filepath.Join(dir, javaDriverClass+".java")
		if err := os.WriteFile(src, []byte(javaDriver), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("osbackend: java driver: %w", err)
		}
		compiled := b.compileJava(ctx, dir, src)
		if ctx.Err() != nil { // not javac's verdict: try again next time
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("osbackend: compiling the java driver: %w", context.Cause(ctx))
		}
		b.javaDir, b.javaCompiled = dir, compiled
	}
	args := []string{"-XX:+UseSerialGC", "-Xshare:auto"}
	if b.javaCompiled {
		return append(args, "-cp", b.javaDir, javaDriverClass), nil
	}
	return append(args, filepath.Join(b.javaDir, javaDriverClass+".java")), nil
}

// compileJava compiles the driver with the javac beside java and reports
// whether it did.
func (b *Executor) compileJava(ctx context.Context, dir, src string) bool {
	java, err := b.lookPath(b.opts.Java)
	if err != nil {
		return false
	}
	javac := filepath.Join(filepath.Dir(resolve(java)), "javac")
	if !isExecutable(javac) {
		return false
	}
	p, err := b.StartCommand(ctx, execd.ProcessSpec{
		Command: "exec " + shellQuote(javac) + " -nowarn -XDsuppressNotes -d " + shellQuote(dir) + " " + shellQuote(src),
	})
	if err != nil {
		return false
	}
	code, err := p.Wait()
	return err == nil && code == 0 && isRegular(filepath.Join(dir, javaDriverClass+".class"))
}

// resolve follows symbolic links (Debian's /usr/bin/java is one to the
// JDK's bin directory through /etc/alternatives).
func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
