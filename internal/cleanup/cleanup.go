// Package cleanup undoes, on failure, what a function built in several
// steps: each step that succeeds registers its undo, and unless the
// function reaches its end and releases them, the undos run in reverse
// order when it returns.
//
//	cu := cleanup.Make(func() { _ = os.RemoveAll(dir) })
//	defer cu.Clean()
//	...
//	cu.Add(func() { _ = store.delete(id) })
//	...
//	cu.Release() // success: keep everything
//
// A Cleanup is not safe for concurrent use.
package cleanup

// Cleanup is a stack of undo functions. The zero value is empty and ready.
type Cleanup struct {
	fns []func()
}

// Make returns a Cleanup holding fns (run last to first).
func Make(fns ...func()) Cleanup { return Cleanup{fns: fns} }

// Add pushes f: it runs before every function added earlier.
func (c *Cleanup) Add(f func()) { c.fns = append(c.fns, f) }

// Clean runs the functions last to first, once; it does nothing after
// Release.
func (c *Cleanup) Clean() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// Release empties the stack (nothing is undone) and returns a function
// that runs what it held, for a caller that takes over the undo.
func (c *Cleanup) Release() func() {
	fns := c.fns
	c.fns = nil
	return func() {
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
	}
}
