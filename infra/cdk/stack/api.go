package stack

import (
	"encoding/json"
	"strings"

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
)

// Route is one route of the HTTP API.
type Route struct {
	// ID is the route's logical id.
	ID string
	// Method is the route's HTTP method.
	Method string
	// Path is the route's path; the route key is "Method Path".
	Path string
	// Client routes are the ones ClientInvokePolicy allows; the redrive
	// route is the operators' (OperatorRedrivePolicy).
	Client bool
}

// Routes are the HTTP API's routes, all integrated with the submit
// function. Every route requires IAM authorization (SigV4), /healthz
// included: an unauthenticated health route would let anyone on the
// internet invoke (and bill) the submit function, and cdk-nag's APIG4
// refuses it; a health probe signs its request like any other client. The
// redrive route is its own route so that its execute-api:Invoke permission
// is separate: callers allowed to submit cannot re-drive.
var Routes = []Route{
	{SubmitRouteID, "POST", submitPath, true},
	{StatusRouteID, "GET", statusPath, true},
	{ResultRouteID, "GET", resultPath, true},
	{RedriveRouteID, "POST", redrivePath, false},
	{HealthRouteID, "GET", healthPath, true},
}

// httpAPI is the HTTP API and the policies that invoke it.
type httpAPI struct {
	api            awsapigatewayv2.HttpApi
	stage          awsapigatewayv2.HttpStage
	clientPolicy   awsiam.ManagedPolicy
	operatorPolicy awsiam.ManagedPolicy
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
	var jwtAuth awsapigatewayv2.IHttpRouteAuthorizer
	if s.JWT() {
		jwtAuth = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(s.JWTIssuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
				AuthorizerName: jsii.String(s.Prefix + "-jwt"),
				JwtAudience:    jsii.Strings(s.JWTAudience...),
			})
	}
	for _, r := range Routes {
		opts := &awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: integration,
			Authorizer:  iamAuth,
		}
		if jwtAuth != nil && r.ID != HealthRouteID {
			// The tenant comes from a JWT claim, so every tenant-scoped
			// route (redrive included) must carry the JWT; the redrive
			// route also requires the operators' scope.
			opts.Authorizer = jwtAuth
			if r.ID == RedriveRouteID {
				opts.AuthorizationScopes = jsii.Strings(s.JWTRedriveScope)
			}
		}
		routes := api.AddRoutes(opts)
		setLogicalID((*routes)[0], r.ID)
	}
	b.http = &httpAPI{api: api, stage: stage}
	statement := func(client bool) awsiam.PolicyStatement {
		var arns []*string
		for _, r := range Routes {
			if r.Client == client {
				arns = append(arns, b.http.routeArn(r.Method, r.Path))
			}
		}
		return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("InvokeQasyncRoutes"), Actions: jsii.Strings("execute-api:Invoke"), Resources: &arns,
		})
	}
	b.http.clientPolicy = awsiam.NewManagedPolicy(b.stack, jsii.String(ClientPolicyID), &awsiam.ManagedPolicyProps{
		Description: jsii.String("qasync " + s.Stage + ": submit executions, read their status and result, health check (not redrive)"),
		Statements:  &[]awsiam.PolicyStatement{statement(true)},
	})
	setLogicalID(b.http.clientPolicy, ClientPolicyID)
	b.http.operatorPolicy = awsiam.NewManagedPolicy(b.stack, jsii.String(OperatorPolicyID), &awsiam.ManagedPolicyProps{
		Description: jsii.String("qasync " + s.Stage + ": re-drive failed or dead-lettered executions"),
		Statements:  &[]awsiam.PolicyStatement{statement(false)},
	})
	setLogicalID(b.http.operatorPolicy, OperatorPolicyID)
}
