package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (a *app) newPoolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pool",
		Aliases: []string{"pools"},
		Short:   "Manage warm pools of container sandboxes",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.newPoolCreateCmd(), a.newPoolLsCmd(), a.newPoolResizeCmd(), a.newPoolRmCmd())
	return cmd
}

func (a *app) newPoolCreateCmd() *cobra.Command {
	var (
		image, runtime, memory, cpu string
		size, most, maxIdle         int
	)
	cmd := &cobra.Command{
		Use:   "create NAME --image IMAGE",
		Short: "Create a pool that keeps --size containers of IMAGE started ahead",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			limits := map[string]string{}
			if memory != "" {
				limits["memory"] = memory
			}
			if cpu != "" {
				limits["cpu"] = cpu
			}
			if len(limits) == 0 {
				limits = nil
			}
			p, err := c.CreatePool(cmd.Context(), api.CreatePoolRequest{Name: args[0],
				Template:     api.PoolTemplate{Image: api.ImageSpec{URI: image}, Runtime: runtime, ResourceLimits: limits, MaxIdleSeconds: maxIdle},
				CapacitySpec: api.PoolCapacitySpec{BufferMin: size, BufferMax: size, PoolMax: max(most, size)}})
			if err != nil {
				return err
			}
			return a.printPools(cmd, []api.Pool{p})
		},
	}
	f := cmd.Flags()
	f.StringVar(&image, "image", "", "image of the members (present on the server)")
	f.StringVar(&runtime, "runtime", "", "runc or runsc (default: the server's oci.default_runtime)")
	f.IntVar(&size, "size", 2, "idle members kept")
	f.IntVar(&most, "max", 1024, "idle plus claimed members at most")
	f.IntVar(&maxIdle, "max-idle", 0, "replace idle members older than this many seconds (0 = never)")
	f.StringVar(&memory, "memory", "", "memory limit members start with (512Mi)")
	f.StringVar(&cpu, "cpu", "", "CPU limit members start with (500m)")
	_ = cmd.MarkFlagRequired("image")
	return cmd
}

func (a *app) newPoolLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls [NAME]",
		Aliases: []string{"list", "get"},
		Short:   "List pools (or show one) with their status",
		Args:    argsUsage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var pools []api.Pool
			if len(args) == 1 {
				p, err := c.GetPool(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				pools = []api.Pool{p}
			} else if pools, err = c.ListPools(cmd.Context()); err != nil {
				return err
			}
			return a.printPools(cmd, pools)
		},
	}
}

func (a *app) newPoolResizeCmd() *cobra.Command {
	var size, most int
	cmd := &cobra.Command{
		Use:   "resize NAME --size N",
		Short: "Change how many idle members a pool keeps",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			p, err := c.UpdatePool(cmd.Context(), args[0], api.PoolCapacitySpec{BufferMin: size, BufferMax: size, PoolMax: max(most, size)})
			if err != nil {
				return err
			}
			return a.printPools(cmd, []api.Pool{p})
		},
	}
	cmd.Flags().IntVar(&size, "size", 2, "idle members kept")
	cmd.Flags().IntVar(&most, "max", 1024, "idle plus claimed members at most")
	return cmd
}

func (a *app) newPoolRmCmd() *cobra.Command {
	return a.newRmCmd("Delete pools and their idle members (claimed sandboxes keep running)", (*hybox.Client).DeletePool)
}

func (a *app) printPools(cmd *cobra.Command, pools []api.Pool) error {
	asJSON, err := a.json(cmd)
	if err != nil {
		return err
	}
	if asJSON {
		return writeValue(a.env.Stdout, pools)
	}
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE\tRUNTIME\tIDLE\tSTARTING\tCLAIMED\tSIZE\tSOURCE\tLAST ERROR")
	for _, p := range pools {
		rt := p.Template.Runtime
		if rt == "" {
			rt = "(default)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Name, p.Template.Image.URI, rt, p.Status.Available,
			p.Status.Starting, p.Status.Allocated, p.CapacitySpec.BufferMax, p.Source, p.Status.LastError)
	}
	return tw.Flush()
}
