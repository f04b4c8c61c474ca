package jsguest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// fetch is the host side of the prelude's fetch: args are the request head
// (engine.HTTPRequest as JSON) and the body (an ArrayBuffer, or undefined).
// The request runs synchronously under the run's context. The result is a
// Uint8Array with the response body and a "head" property holding the
// engine.HTTPResponse as JSON. A failure throws an Error whose message is the
// host's explanation (the prelude rethrows it as a TypeError); its "timeout"
// property is "1" when the request's own timeout expired.
func (v *vm) fetch(args []uint32) uint32 {
	if len(args) < 1 {
		return v.throw("Error", "", "fetch: missing request")
	}
	var req engine.HTTPRequest
	if err := json.Unmarshal([]byte(v.arg(args, 0)), &req); err != nil {
		return v.throw("Error", "", "fetch: bad request: "+err.Error())
	}
	if len(args) > 1 && v.call32(v.x.isUndefined, uint64(args[1])) == 0 {
		b, ok := v.arrayBuffer(args[1])
		if !ok {
			return 0 // the exception is pending
		}
		req.Body = b
	}
	ctx := context.WithoutCancel(v.ctx)
	if v.io != nil && v.io.ctx != nil {
		ctx = v.io.ctx
	}
	resp, err := engine.DoHTTP(ctx, v.egress, req)
	if err != nil {
		if ctx.Err() != nil {
			// The run is over: stop like a blocked read does.
			v.stop.CompareAndSwap(uint32(stopNone), uint32(stopContext))
		}
		var he *engine.HTTPError
		if errors.As(err, &he) && he.Timeout {
			return v.throw("Error", "", he.Msg, "timeout", "1")
		}
		return v.throw("Error", "", err.Error())
	}
	// The body is copied twice into the guest (a malloc'd buffer, then the
	// array); refuse what the heap cannot hold instead of failing the VM.
	if v.memLimit > 0 && int64(len(resp.Body))*2 > v.memLimit {
		return v.throw("Error", "", fmt.Sprintf("response body of %d bytes does not fit in the JavaScript heap (%d bytes)", len(resp.Body), v.memLimit))
	}
	head, err := json.Marshal(resp)
	if err != nil {
		return v.throw("Error", "", "fetch: "+err.Error())
	}
	box := v.newBytes(resp.Body)
	if v.isException(box) {
		return box
	}
	hs := v.newString(head)
	v.setProp(box, "head", hs)
	v.freeValue(hs)
	return box
}

// arrayBuffer copies the bytes of the non-empty ArrayBuffer in box. ok is
// false when box is not one (an exception is then pending).
func (v *vm) arrayBuffer(box uint32) (b []byte, ok bool) {
	p := v.call32(v.x.getArrayBuffer, uint64(box), uint64(v.scratch))
	if p == 0 {
		return nil, false
	}
	n, _ := v.mem.ReadUint32Le(v.scratch)
	data, ok := v.mem.Read(p, n)
	if !ok {
		v.throw("Error", "", "fetch: body out of range ("+strconv.Itoa(int(n))+" bytes)")
		return nil, false
	}
	return append([]byte(nil), data...), true
}
