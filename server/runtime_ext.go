package server

import "github.com/hybox-dev/hybox/runtimes"

// runtimeExtensions returns a sandbox's extensions as the API shows them:
// those of the request plus extensions["hybox.io/runtime"], the runtime it
// runs on, whether or not the request named one (the router chose it).
// The record's own map is not changed.
func runtimeExtensions(ext map[string]string, runtime string) map[string]string {
	if runtime == "" {
		return ext
	}
	out := make(map[string]string, len(ext)+1)
	for k, v := range ext {
		out[k] = v
	}
	out[runtimes.ExtensionRuntime] = runtime
	return out
}
