// Package devstack holds the CloudFormation template of the qasync
// construct's dev stack (infra/cdk, stage dev), as synthesized by the CDK
// app's tests with placeholder bundles. infra/cdk/stack's
// TestGoldenTemplate fails when it differs from a fresh synthesis, so it
// is the stack's code, not a copy that drifts.
//
// It is what `qasync local` runs when no template is given (the
// construct's default topology: the five functions, their event sources,
// schedule, routes and roles), and the template the IAM and local-cloud
// tests enforce.
package devstack

import _ "embed"

// Template is the dev stack's synthesized template (JSON).
//
//go:embed dev.template.json
var Template []byte

// Path is the template's path from the repository's root.
const Path = "shared/internal/devstack/dev.template.json"
