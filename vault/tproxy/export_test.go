package tproxy

// LeavesGenerated returns how many leaf certificates c has signed.
func LeavesGenerated(c *CA) int64 { return c.generated.Load() }
