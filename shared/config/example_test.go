package config_test

import (
	"fmt"
	"strings"

	"github.com/qasync/qasync/shared/config"
)

func ExampleLoad() {
	env := map[string]string{
		"PIPELINE_ORCHESTRATOR_STATE_PROVIDER":     "dynamo",
		"PIPELINE_ORCHESTRATOR_LEASE_MS":           "15000",
		"PIPELINE_ORCHESTRATOR_SWEEP_GRACE":        "PT30S",
		"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN":        "not-printed",
		"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "none",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	cfg, rest, err := config.Load(lookup, []string{"--lease-ms=20000", "--addr=:9090", "serve"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.StateProvider, cfg.Lease, cfg.SweepGrace, cfg.HTTPAddr, cfg.TenantSource, rest)
	// The token is set, but printing the configuration never shows it.
	fmt.Println(cfg.AdminToken != "", strings.Contains(cfg.String(), "not-printed"), strings.Contains(cfg.String(), "admin.token=set"))
	// Output:
	// dynamo 20s 30s :9090 none [serve]
	// true false true
}
