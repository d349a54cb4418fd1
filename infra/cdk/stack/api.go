package stack

import (
	"encoding/json"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

// Route paths of the HTTP API (shared/httpapi's routes).
const (
	submitPath  = "/v1/pipelines/{pipelineId}/executions"
	statusPath  = "/v1/executions/{executionId}"
	resultPath  = "/v1/executions/{executionId}/result"
	redrivePath = "/v1/executions/{executionId}/redrive"
	healthPath  = "/healthz"
	awaitPath   = "/v1/executions/{executionId}/awaits/{awaitId}/complete"
	// The operator plane.
	listPath             = "/v1/executions"
	historyPath          = "/v1/executions/{executionId}/history"
	cancelPath           = "/v1/executions/{executionId}/cancel"
	bulkRedrivePath      = "/v1/redrives"
	redriveJobPath       = "/v1/redrives/{redriveId}"
	deadLettersPath      = "/v1/dead-letters"
	deadLetterCountsPath = "/v1/dead-letters/counts"
	inputPath            = "/v1/inputs/{executionId}"
	pipelinesPath        = "/v1/pipelines"
	pipelinePath         = "/v1/pipelines/{pipelineId}"
	openAPIPath          = "/openapi.json"
	// Pause and resume (operator routes).
	pausePath      = "/v1/executions/{executionId}/pause"
	resumePath     = "/v1/executions/{executionId}/resume"
	bulkPausePath  = "/v1/pauses"
	pauseJobPath   = "/v1/pauses/{jobId}"
	bulkResumePath = "/v1/resumes"
	resumeJobPath  = "/v1/resumes/{jobId}"
)

// Route is one route of the HTTP API.
type Route struct {
	// ID is the route's logical id.
	ID string
	// Method is the route's HTTP method.
	Method string
	// Path is the route's path; the route key is "Method Path".
	Path string
	// Client routes are the ones ClientInvokePolicy allows; the operator
	// routes (re-drive, cancel, bulk re-drive and its progress, an
	// execution's input) are the operators' (OperatorRedrivePolicy), each
	// its own route.
	Client bool
	// ResumeToken routes have no API Gateway authorizer: the request's
	// X-Resume-Token, verified by the submit function, is the
	// authorization. Neither managed policy names them.
	ResumeToken bool
}

// Routes are the HTTP API's routes, all integrated with the submit
// function. Every route but the await completion route requires IAM
// authorization (SigV4), /healthz included: an unauthenticated health
// route would let anyone on the internet invoke (and bill) the submit
// function, and cdk-nag's APIG4 refuses it; a health probe signs its
// request like any other client. The operator routes (re-drive, cancel,
// bulk re-drive and its progress, an execution's input) are routes of
// their own so that their execute-api:Invoke permission is separate:
// callers allowed to submit, list and read cannot re-drive or cancel, nor
// read an execution's input (which can hold personal data).
//
// The await completion route is called by the external party an await
// step waits for (a webhook, a person), which has no AWS identity. Its
// authorization is the resume token: an HMAC-SHA256 over tenant,
// execution id and await id keyed by the stack's Secrets Manager secret,
// so it cannot be forged and opens one await of one execution of one
// tenant. It has its own, lower throttle (Settings.AwaitThrottleRateLimit),
// and a duplicate or late completion changes nothing. With
// Settings.AwaitWAF (every stage but dev by default) it leaves the HTTP
// API for the await front (awaitFront), where a WAF web ACL limits each
// client IP, so that no caller can keep that throttle spent for all.
var Routes = []Route{
	{SubmitRouteID, "POST", submitPath, true, false},
	{StatusRouteID, "GET", statusPath, true, false},
	{ResultRouteID, "GET", resultPath, true, false},
	{RedriveRouteID, "POST", redrivePath, false, false},
	{HealthRouteID, "GET", healthPath, true, false},
	{AwaitCompleteRouteID, "POST", awaitPath, false, true},
	{ListRouteID, "GET", listPath, true, false},
	{HistoryRouteID, "GET", historyPath, true, false},
	{DeadLettersRouteID, "GET", deadLettersPath, true, false},
	{OpenAPIRouteID, "GET", openAPIPath, true, false},
	{CancelRouteID, "POST", cancelPath, false, false},
	{BulkRedriveRouteID, "POST", bulkRedrivePath, false, false},
	{RedriveJobRouteID, "GET", redriveJobPath, false, false},
	{DeadLetterCountsRouteID, "GET", deadLetterCountsPath, true, false},
	{InputRouteID, "GET", inputPath, false, false},
	{PipelinesRouteID, "GET", pipelinesPath, true, false},
	{PipelineRouteID, "GET", pipelinePath, true, false},
	{PauseRouteID, "POST", pausePath, false, false},
	{ResumeRouteID, "POST", resumePath, false, false},
	{BulkPauseRouteID, "POST", bulkPausePath, false, false},
	{PauseJobRouteID, "GET", pauseJobPath, false, false},
	{BulkResumeRouteID, "POST", bulkResumePath, false, false},
	{ResumeJobRouteID, "GET", resumeJobPath, false, false},
}

// The route ids of pause and resume.
const (
	PauseRouteID      = "PauseRoute"
	ResumeRouteID     = "ResumeRoute"
	BulkPauseRouteID  = "BulkPauseRoute"
	PauseJobRouteID   = "BulkPauseProgressRoute"
	BulkResumeRouteID = "BulkResumeRoute"
	ResumeJobRouteID  = "BulkResumeProgressRoute"
)

func init() { Routes = append(Routes, scheduleRoutes...) }

// Operator reports whether r is an operator route (OperatorRedrivePolicy;
// under JWT its scope).
func (r Route) Operator() bool { return !r.Client && !r.ResumeToken }

// Key is the route key, "METHOD /path".
func (r Route) Key() string { return r.Method + " " + r.Path }

// httpAPI is the HTTP API and the policies that invoke it.
type httpAPI struct {
	api            awsapigatewayv2.HttpApi
	stage          awsapigatewayv2.HttpStage
	clientPolicy   awsiam.ManagedPolicy
	operatorPolicy awsiam.ManagedPolicy
	// tokenRoutes are the routes without an authorizer (Route.ResumeToken),
	// in this API or, with Settings.AwaitWAF, in the await front's origin.
	tokenRoutes []tokenRoute
	// tenants are the tenant stages (Settings.TenantStages), by name.
	tenants map[string]*tenantStage
}

// tokenRoute is a route without an authorizer (Route.ResumeToken) and
// its route key.
type tokenRoute struct {
	route awsapigatewayv2.HttpRoute
	key   string
}

// tenantStage is a tenant's own stage of the HTTP API and the policy
// that invokes the client routes on it.
type tenantStage struct {
	stage  awsapigatewayv2.HttpStage
	policy awsiam.ManagedPolicy
}

// sharedStage is the name of the HTTP API's shared stage.
const sharedStage = "$default"

// routeArn is the execute-api ARN of method path on stage, with each
// path parameter as a wildcard.
func (a *httpAPI) routeArn(method, path, stage string) *string {
	return a.api.ArnForExecuteApi(jsii.String(method), jsii.String(wildcardParams(path)), jsii.String(stage))
}

// TenantStageID is the logical id suffix of tenant stage name's
// resources: its words capitalized and joined ("acme-eu": AcmeEu). The
// stage is TenantStage<suffix>, its policy TenantInvokePolicy<suffix>.
func TenantStageID(name string) string {
	var b strings.Builder
	for _, w := range strings.Split(name, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// wildcardParams replaces each {param} segment of path with *.
func wildcardParams(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, "/")
}

// accessLogSettings implements awsapigatewayv2.IAccessLogSettings.
type accessLogSettings struct {
	destination awsapigatewayv2.IAccessLogDestination
	format      awsapigateway.AccessLogFormat
}

// Destination implements awsapigatewayv2.IAccessLogSettings.
func (a *accessLogSettings) Destination() awsapigatewayv2.IAccessLogDestination {
	return a.destination
}

// Format implements awsapigatewayv2.IAccessLogSettings.
func (a *accessLogSettings) Format() awsapigateway.AccessLogFormat { return a.format }

// AccessLogFields are the fields of each access log line (JSON). They
// identify the request, the caller and the outcome; no header, query or
// body is logged.
var AccessLogFields = map[string]string{
	"requestId":          "$context.requestId",
	"requestTime":        "$context.requestTime",
	"sourceIp":           "$context.identity.sourceIp",
	"stage":              "$context.stage",
	"routeKey":           "$context.routeKey",
	"status":             "$context.status",
	"protocol":           "$context.protocol",
	"responseLength":     "$context.responseLength",
	"responseLatency":    "$context.responseLatency",
	"integrationLatency": "$context.integrationLatency",
	"integrationError":   "$context.integrationErrorMessage",
	"authorizerError":    "$context.authorizer.error",
	"callerAccountId":    "$context.identity.accountId",
	"callerArn":          "$context.identity.userArn",
}

// httpAPI creates the HTTP API, its $default stage and the tenant
// stages with access logging and throttling, the routes with their
// authorizers, and the managed policies that invoke them. With
// Settings.AwaitWAF the await completion route is not among them: the
// await front (awaitFront) serves it.
func (b *builder) httpAPI() {
	s := b.s
	api := awsapigatewayv2.NewHttpApi(b.stack, jsii.String(HTTPAPIID), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(s.Prefix + "-api"),
		Description:        jsii.String("qasync HTTP API (stage " + s.Stage + ")"),
		CreateDefaultStage: jsii.Bool(false),
	})
	setLogicalID(api, HTTPAPIID)
	integration := b.submitIntegration("SubmitIntegration")
	iamAuth := awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	noAuth := awsapigatewayv2.NewHttpNoneAuthorizer()
	var jwtAuth awsapigatewayv2.IHttpRouteAuthorizer
	if s.JWT() {
		jwtAuth = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(s.JWTIssuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
				AuthorizerName: jsii.String(s.Prefix + "-jwt"),
				JwtAudience:    jsii.Strings(s.JWTAudience...),
			})
	}
	var tokenRoutes []tokenRoute
	for _, r := range Routes {
		if r.ResumeToken && s.AwaitWAF {
			continue // the await front's origin serves it
		}
		opts := &awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: integration,
			Authorizer:  iamAuth,
		}
		if r.ResumeToken {
			// Authorized by the resume token in the submit function; see
			// Routes.
			opts.Authorizer = noAuth
		} else if jwtAuth != nil && r.ID != HealthRouteID {
			// The tenant comes from a JWT claim, so every tenant-scoped
			// route (the operator routes included) must carry the JWT; the
			// operator routes also require the operators' scope.
			opts.Authorizer = jwtAuth
			if r.Operator() {
				opts.AuthorizationScopes = jsii.Strings(s.JWTRedriveScope)
			}
		}
		route := (*api.AddRoutes(opts))[0]
		setLogicalID(route, r.ID)
		if r.ResumeToken {
			tokenRoutes = append(tokenRoutes, tokenRoute{route, r.Key()})
		}
	}
	logs := b.logGroup("HttpApiAccessLogs", "/aws/apigateway/"+s.Prefix+"-api")
	b.http = &httpAPI{api: api, tokenRoutes: tokenRoutes, tenants: map[string]*tenantStage{}}
	b.http.stage = b.httpStage(api, "HttpApiDefaultStage", sharedStage, logs, Throttle{s.ThrottleRateLimit, s.ThrottleBurstLimit}, tokenRoutes)
	// The shared policies name the $default stage only: a tenant stage's
	// throttle is its tenant's alone. (Their descriptions stay as they
	// were: a managed policy's new description replaces the policy, and
	// the roles it is attached to would lose it.)
	b.http.clientPolicy = b.invokePolicy(ClientPolicyID, sharedStage, true,
		"qasync "+s.Stage+": submit executions, read and list them, their results, histories and dead letters, health check (not the operator routes)")
	b.http.operatorPolicy = b.invokePolicy(OperatorPolicyID, sharedStage, false,
		"qasync "+s.Stage+": re-drive and cancel executions, start bulk re-drives and read their progress")
	for _, name := range sortedKeys(s.TenantStages) {
		id := TenantStageID(name)
		// Every stage carries every route: the token routes keep their
		// own throttle on a tenant stage too.
		stage := b.httpStage(api, "TenantStage"+id, name, logs, s.TenantStages[name], tokenRoutes)
		policy := b.invokePolicy("TenantInvokePolicy"+id, name, true,
			"qasync "+s.Stage+": the client routes of ClientInvokePolicy on tenant "+name+"'s own stage "+name+" (its own throttle)")
		b.http.tenants[name] = &tenantStage{stage: stage, policy: policy}
	}
}

// submitIntegration is a new integration of the submit function (payload
// format 2.0), for one HTTP API.
func (b *builder) submitIntegration(id string) awsapigatewayv2integrations.HttpLambdaIntegration {
	return awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(id), b.fn[Submit].fn,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()})
}

// httpStage creates stage name of api: auto-deployed, access logs (the
// fields of AccessLogFields) to logs, throttle as its default route
// settings, and each of tokenRoutes with the await throttle
// (Settings.AwaitThrottleRateLimit), below the stage's since anyone may
// call them.
func (b *builder) httpStage(api awsapigatewayv2.HttpApi, id, name string, logs awslogs.ILogGroup, throttle Throttle, tokenRoutes []tokenRoute) awsapigatewayv2.HttpStage {
	format, _ := json.Marshal(AccessLogFields)
	stage := awsapigatewayv2.NewHttpStage(b.stack, jsii.String(id), &awsapigatewayv2.HttpStageProps{
		HttpApi:    api,
		StageName:  jsii.String(name),
		AutoDeploy: jsii.Bool(true),
		AccessLogSettings: &accessLogSettings{
			destination: awsapigatewayv2.NewLogGroupLogDestination(logs),
			format:      awsapigateway.AccessLogFormat_Custom(jsii.String(string(format))),
		},
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(throttle.RateLimit),
			BurstLimit: jsii.Number(float64(throttle.BurstLimit)),
		},
	})
	setLogicalID(stage, id)
	// HttpStage has no per-route settings; the L1 stage has.
	routeSettings := map[string]any{}
	for _, t := range tokenRoutes {
		// A stage's route settings name routes by key, and CloudFormation
		// refuses a key whose route does not exist yet.
		stage.Node().AddDependency(t.route)
		routeSettings[t.key] = map[string]any{
			"ThrottlingRateLimit":  b.s.AwaitThrottleRateLimit,
			"ThrottlingBurstLimit": b.s.AwaitThrottleBurstLimit,
		}
	}
	if len(routeSettings) > 0 {
		stage.Node().DefaultChild().(awscdk.CfnResource).AddPropertyOverride(jsii.String("RouteSettings"), routeSettings)
	}
	return stage
}

// invokePolicy creates a managed policy allowing execute-api:Invoke on
// the client routes (client) or the operator routes (!client) of stage.
func (b *builder) invokePolicy(id, stage string, client bool, description string) awsiam.ManagedPolicy {
	var arns []*string
	for _, r := range Routes {
		if r.Client == client && !r.ResumeToken {
			arns = append(arns, b.http.routeArn(r.Method, r.Path, stage))
		}
	}
	policy := awsiam.NewManagedPolicy(b.stack, jsii.String(id), &awsiam.ManagedPolicyProps{
		Description: jsii.String(description),
		Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("InvokeQasyncRoutes"), Actions: jsii.Strings("execute-api:Invoke"), Resources: &arns,
		})},
	})
	setLogicalID(policy, id)
	return policy
}
