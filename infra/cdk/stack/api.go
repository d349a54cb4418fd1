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
	openAPIPath          = "/openapi.json"
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
// and a duplicate or late completion changes nothing.
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
}

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
	// tokenRoutes are the routes without an authorizer (Route.ResumeToken).
	tokenRoutes []awsapigatewayv2.HttpRoute
}

// routeArn is the execute-api ARN of method path on any stage, with each
// path parameter as a wildcard.
func (a *httpAPI) routeArn(method, path string) *string {
	return a.api.ArnForExecuteApi(jsii.String(method), jsii.String(wildcardParams(path)), jsii.String("*"))
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

// httpAPI creates the HTTP API, its $default stage with access logging and
// throttling, the routes with their authorizers, and the client and
// operator managed policies.
func (b *builder) httpAPI() {
	s := b.s
	api := awsapigatewayv2.NewHttpApi(b.stack, jsii.String(HTTPAPIID), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(s.Prefix + "-api"),
		Description:        jsii.String("qasync HTTP API (stage " + s.Stage + ")"),
		CreateDefaultStage: jsii.Bool(false),
	})
	setLogicalID(api, HTTPAPIID)
	format, _ := json.Marshal(AccessLogFields)
	stage := awsapigatewayv2.NewHttpStage(b.stack, jsii.String("HttpApiDefaultStage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    api,
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		AccessLogSettings: &accessLogSettings{
			destination: awsapigatewayv2.NewLogGroupLogDestination(b.logGroup("HttpApiAccessLogs", "/aws/apigateway/"+s.Prefix+"-api")),
			format:      awsapigateway.AccessLogFormat_Custom(jsii.String(string(format))),
		},
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(s.ThrottleRateLimit),
			BurstLimit: jsii.Number(float64(s.ThrottleBurstLimit)),
		},
	})
	setLogicalID(stage, "HttpApiDefaultStage")
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("SubmitIntegration"), b.fn[Submit].fn,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()})
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
	// The token routes' own throttle, below the stage's default since
	// anyone may call them. HttpStage has no per-route settings; the L1
	// stage has.
	routeSettings := map[string]any{}
	var tokenRoutes []awsapigatewayv2.HttpRoute
	for _, r := range Routes {
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
		routes := api.AddRoutes(opts)
		route := (*routes)[0]
		setLogicalID(route, r.ID)
		if r.ResumeToken {
			// A stage's route settings name routes by key, and
			// CloudFormation refuses a key whose route does not exist yet.
			stage.Node().AddDependency(route)
			tokenRoutes = append(tokenRoutes, route)
			routeSettings[r.Key()] = map[string]any{
				"ThrottlingRateLimit":  s.AwaitThrottleRateLimit,
				"ThrottlingBurstLimit": s.AwaitThrottleBurstLimit,
			}
		}
	}
	if len(routeSettings) > 0 {
		stage.Node().DefaultChild().(awscdk.CfnResource).AddPropertyOverride(jsii.String("RouteSettings"), routeSettings)
	}
	b.http = &httpAPI{api: api, stage: stage, tokenRoutes: tokenRoutes}
	statement := func(client bool) awsiam.PolicyStatement {
		var arns []*string
		for _, r := range Routes {
			if r.Client == client && !r.ResumeToken {
				arns = append(arns, b.http.routeArn(r.Method, r.Path))
			}
		}
		return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("InvokeQasyncRoutes"), Actions: jsii.Strings("execute-api:Invoke"), Resources: &arns,
		})
	}
	b.http.clientPolicy = awsiam.NewManagedPolicy(b.stack, jsii.String(ClientPolicyID), &awsiam.ManagedPolicyProps{
		Description: jsii.String("qasync " + s.Stage + ": submit executions, read and list them, their results, histories and dead letters, health check (not the operator routes)"),
		Statements:  &[]awsiam.PolicyStatement{statement(true)},
	})
	setLogicalID(b.http.clientPolicy, ClientPolicyID)
	b.http.operatorPolicy = awsiam.NewManagedPolicy(b.stack, jsii.String(OperatorPolicyID), &awsiam.ManagedPolicyProps{
		Description: jsii.String("qasync " + s.Stage + ": re-drive and cancel executions, start bulk re-drives and read their progress, read executions' inputs"),
		Statements:  &[]awsiam.PolicyStatement{statement(false)},
	})
	setLogicalID(b.http.operatorPolicy, OperatorPolicyID)
}
