package jsguest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// killGrace is how long a guest may keep running after its context is done
// before it is destroyed (vm.destroy). QuickJS normally stops at the next interrupt poll, well
// within this; only a guest stuck in C that polls nothing is destroyed
// (e.g. Array.prototype.join of a huge sparse array).
const killGrace = 2 * time.Second

// errIgnoredInterrupt is why a guest destroyed after killGrace is lost.
var errIgnoredInterrupt = errors.New("the interpreter did not stop when interrupted and was destroyed")

// guestError is an uncaught JavaScript exception, described by the prelude.
type guestError struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	Text    string `json:"text"` // "Name: message\n    at ..." like node prints it
}

// outcome is how an execution ended.
type outcome struct {
	value    uint32      // box with the completion value, 0 = none; the caller frees it
	text     string      // the value rendered, when exec was given a render
	rendered bool        // text holds a result
	exc      *guestError // uncaught exception
	stopped  stopReason  // why the host stopped the guest, stopNone if it was not
	lost     bool        // the instance failed; its state is gone
}

// watcher stops a running guest when the context of its execution is done:
// at once through the interrupt hook (vm.stop), and, when it has not
// returned killGrace later (a loop in C polls no hook), by destroying it.
type watcher struct {
	mu       sync.Mutex
	finished bool
	timer    *time.Timer
	stop     func() bool
}

// watch starts watching ctx for v.
func (v *vm) watch(ctx context.Context) *watcher {
	w := &watcher{}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.finished {
			return
		}
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopContext))
		w.timer = time.AfterFunc(killGrace, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.finished {
				v.destroy(errIgnoredInterrupt)
			}
		})
	})
	return w
}

// end stops watching: once it returns, no stop or kill of this watch
// starts any more (one in progress has finished).
func (w *watcher) end() {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// exec runs start (which evaluates or calls something and returns a value
// box) to completion: a returned promise is awaited, then promise jobs and
// timers run until none is left. render, when not nil, renders the final
// value (which exec then frees) under the same watch, since rendering can
// run the guest's code (getters, proxies); ok false means no result. Output
// and stdin go through rio. A wasm failure returns lost with the error;
// everything else is in the outcome.
func (v *vm) exec(ctx context.Context, rio *runIO, awaitValue bool, start func() uint32, render func(val uint32) (text string, ok bool)) (res outcome, err error) {
	base := v.ctx
	runCtx, kill := context.WithCancel(base)
	v.ctx = runCtx
	v.cancel.Store(&kill)
	v.io = rio
	rio.ctx = ctx
	v.stop.Store(uint32(stopNone))
	w := v.watch(ctx)
	defer func() {
		w.end()
		v.cancel.Store(nil)
		kill()
		v.ctx = base
		v.io = nil
		if why := v.destroyed.Load(); why != nil && !res.lost {
			// Destroyed just as it returned: its guard is set, so the
			// next call would trap. It is lost all the same.
			v.close()
			res, err = outcome{lost: true, stopped: stopReason(v.stop.Load())}, *why
		}
	}()
	defer onTrap(func(e error) {
		v.close()
		res = outcome{lost: true, stopped: stopReason(v.stop.Load())}
		err = e
		if why := v.destroyed.Load(); why != nil {
			err = *why
		}
	})

	val := start()
	if val == 0 || v.isException(val) { // 0: an exception is pending (see vm.throw)
		v.freeValue(val)
		return v.fail(v.takeException()), nil
	}
	if awaitValue && v.call32(v.x.isPromise, uint64(val)) != 0 {
		p := val
		val = 0
		for {
			if exc := v.runJobs(); exc != 0 {
				v.freeValue(p)
				return v.fail(exc), nil
			}
			if st := v.call32(v.x.promiseState, uint64(p)); st != promisePending {
				r := v.call32(v.x.promiseResult, uint64(p))
				v.dropRejection(p)
				v.freeValue(p)
				if st == promiseRejected {
					return v.fail(r), nil
				}
				val = r
				break
			}
			if s := v.stop.Load(); s != uint32(stopNone) {
				v.freeValue(p)
				return v.halt(), nil
			}
			ran, o := v.timerStep(ctx)
			if o != nil {
				v.freeValue(p)
				return *o, nil
			}
			if !ran {
				// Nothing can settle the promise any more: report it as it is.
				val = p
				break
			}
		}
	}
	// Drain promise jobs and timers.
	for {
		if exc := v.runJobs(); exc != 0 {
			v.freeValue(val)
			return v.fail(exc), nil
		}
		if v.stop.Load() != uint32(stopNone) {
			v.freeValue(val)
			return v.halt(), nil
		}
		ran, o := v.timerStep(ctx)
		if o != nil {
			v.freeValue(val)
			return *o, nil
		}
		if !ran {
			break
		}
	}
	if len(v.rejections) > 0 {
		reason := v.call32(v.x.dupValue, uint64(v.rejections[0].reason))
		v.clearRejections()
		v.freeValue(val)
		o := v.fail(reason)
		return o, nil
	}
	if render == nil {
		return outcome{value: val}, nil
	}
	text, ok := render(val)
	v.freeValue(val)
	if v.stop.Load() != uint32(stopNone) {
		return v.halt(), nil
	}
	return outcome{text: text, rendered: ok}, nil
}

// timerStep waits for the earliest timer and runs it. ran is false when no
// timer is pending; a non-nil outcome ends the execution.
func (v *vm) timerStep(ctx context.Context) (ran bool, o *outcome) {
	next := v.hyCall("nextTimer")
	if v.isException(next) {
		v.freeValue(next)
		out := v.fail(v.takeException())
		return false, &out
	}
	ms, _ := v.str(next)
	v.freeValue(next)
	d, err := time.ParseDuration(ms + "ms")
	if err != nil || d < 0 {
		return false, nil
	}
	if err := sleep(ctx, d); err != nil {
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopContext))
		out := v.halt()
		return false, &out
	}
	r := v.hyCall("runTimer")
	if v.isException(r) {
		v.freeValue(r)
		out := v.fail(v.takeException())
		return false, &out
	}
	v.freeValue(r)
	return true, nil
}

// fail turns an exception box (consumed) into an outcome: a host stop when
// the host asked the guest to stop, else a described guest error.
func (v *vm) fail(exc uint32) outcome {
	if v.stop.Load() != uint32(stopNone) {
		v.freeValue(exc)
		return v.halt()
	}
	ge := v.describe(exc)
	v.freeValue(exc)
	v.reset()
	return outcome{exc: ge}
}

// halt ends an execution the host stopped.
func (v *vm) halt() outcome {
	v.reset()
	return outcome{stopped: stopReason(v.stop.Load())}
}

// reset drops what an abandoned execution left behind: timers and tracked
// rejections. Pending promise jobs stay queued.
func (v *vm) reset() {
	v.clearRejections()
	saved := v.stop.Swap(uint32(stopNone))
	r := v.hyCall("clearTimers")
	if v.isException(r) {
		v.freeValue(v.takeException())
	}
	v.freeValue(r)
	v.stop.Store(saved)
}

// describe converts an exception value to a guestError.
func (v *vm) describe(exc uint32) *guestError {
	uncatchable := v.call32(v.x.isUncatchable, uint64(exc)) != 0
	s, ok := v.hyString("describe", exc)
	ge := &guestError{}
	if ok && json.Unmarshal([]byte(s), ge) == nil {
		return ge
	}
	if !ok {
		v.freeValue(v.takeException())
	}
	// The prelude could not describe it (for example out of memory): read
	// what we can directly.
	ge.Name = "InternalError"
	if uncatchable {
		ge.Message = "out of memory"
	}
	if m := v.getProp(exc, "message"); m != 0 {
		if ms, ok := v.str(m); ok && ms != "" {
			ge.Message = ms
		} else if !ok {
			v.freeValue(v.takeException())
		}
		v.freeValue(m)
	}
	ge.Text = ge.Name + ": " + ge.Message
	return ge
}

// render returns the prelude's rendering of the value in box (REPL style
// when repl, console.log style otherwise).
func (v *vm) render(box uint32, repl bool) string {
	name := "format"
	if repl {
		name = "inspect"
	}
	s, ok := v.hyString(name, box)
	if !ok {
		v.freeValue(v.takeException())
		return ""
	}
	return s
}
