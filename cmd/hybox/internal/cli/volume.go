package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (a *app) newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Manage named volumes (the pvc volumes sandboxes share)",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.newVolumeCreateCmd(), a.newVolumeLsCmd(), a.newVolumeRmCmd())
	return cmd
}

func (a *app) newVolumeCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Create an empty named volume",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printVolumes(cmd, []api.NamedVolume{v})
		},
	}
}

func (a *app) newVolumeLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls [NAME]",
		Aliases: []string{"list", "get"},
		Short:   "List named volumes (or show one) with the sandboxes using them",
		Args:    argsUsage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var vs []api.NamedVolume
			if len(args) == 1 {
				v, err := c.GetVolume(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				vs = []api.NamedVolume{v}
			} else if vs, err = c.ListVolumes(cmd.Context()); err != nil {
				return err
			}
			return a.printVolumes(cmd, vs)
		},
	}
}

func (a *app) newVolumeRmCmd() *cobra.Command {
	return a.newRmCmd("Delete named volumes and their files (refused while a sandbox uses one)", (*hybox.Client).DeleteVolume)
}

func (a *app) printVolumes(cmd *cobra.Command, vs []api.NamedVolume) error {
	asJSON, err := a.json(cmd)
	if err != nil {
		return err
	}
	if asJSON {
		return writeValue(a.env.Stdout, vs)
	}
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tCREATED\tUSED BY")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, humanBytes(v.SizeBytes), v.CreatedAt.Format("2006-01-02 15:04:05"), strings.Join(v.UsedBy, ","))
	}
	return tw.Flush()
}
