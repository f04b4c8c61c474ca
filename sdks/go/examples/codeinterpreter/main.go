// Command codeinterpreter is the loop of a code-interpreter agent: cells
// of Python run one after the other in one context, so that each sees the
// variables of the ones before; output, results and errors come back per
// cell, and an exception does not end the session.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// cells stand for the code a model writes, turn after turn.
var cells = []string{
	"data = [3, 1, 4, 1, 5, 9, 2, 6]\nprint('loaded', len(data), 'values')",
	"mean = sum(data) / len(data)\nmean",
	"data.sort()\ndata[len(data) // 2]",
	"1 / (mean - mean)", // raises: the agent sees the traceback and goes on
	"import json\njson.dumps({'mean': mean, 'max': max(data)})",
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	client, err := hybox.FromEnv()
	if err != nil {
		return err
	}
	timeout := 600.0
	sb, err := client.Create(ctx, api.CreateSandboxRequest{Timeout: &timeout})
	if err != nil {
		return err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "python"})
	if err != nil {
		return err
	}
	for i, src := range cells {
		fmt.Printf("[%d] %s\n", i+1, strings.ReplaceAll(src, "\n", "; "))
		code := hybox.CodeIn(cc.ID, src)
		cellCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a runaway cell is interrupted
		x, err := sb.RunCode(cellCtx, code, nil)
		cancel()
		if err != nil {
			return err
		}
		if out := strings.TrimSuffix(x.Text(), "\n"); out != "" {
			fmt.Println("    out:", strings.ReplaceAll(out, "\n", "\n         "))
		}
		for _, r := range x.Results {
			fmt.Println("    result:", r["text"])
		}
		var ee *hybox.ExecutionError
		if errors.As(x.Err(), &ee) {
			fmt.Printf("    error: %s: %s\n", ee.EName, ee.EValue)
		}
	}
	return nil
}
