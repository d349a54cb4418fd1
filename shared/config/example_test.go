package config_test

import (
	"fmt"

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
	fmt.Println(cfg.AdminToken != "", cfg)
	// Output:
	// dynamo 20s 30s :9090 none [serve]
	// true config{mode=QUEUE_ASYNC state-provider=dynamo dispatcher-provider=event dlq-provider=log idempotency-policy=OPTIONAL_CLIENT_KEY strict-startup=false lease-ms=20000 max-retries=3 retry-delay=1s retry-multiplier=2 retry-max-delay=5m0s sweep-interval=1s sweep-limit=100 sweep-grace=30s execution-ttl-days=30 worker-concurrency=8 payload.inline-budget-bytes=65536 admin.token=set http.addr=:9090 http.max-body-bytes=6291456 http.tenant-source=none queue-url="" dlq-url="" log-level=info dynamo.execution-table=qasync-executions dynamo.key-table=qasync-execution-keys dynamo.execution-payload-table=qasync-execution-payloads dynamo.due-shards=4 sqs.wait-seconds=20 sqs.visibility-timeout=1m0s}
}
