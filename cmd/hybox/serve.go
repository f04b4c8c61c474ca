package main

import "github.com/spf13/cobra"

// newServeCmd returns `hybox serve`. (Being written by the server owner.)
func newServeCmd() *cobra.Command {
	return &cobra.Command{Use: "serve", Short: "Run the hybox server"}
}
