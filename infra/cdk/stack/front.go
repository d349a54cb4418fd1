package stack

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/jsii-runtime-go"
)

// Logical ids of the await front (Settings.AwaitWAF).
const (
	// AwaitOriginAPIID is the HTTP API that carries only the token routes
	// behind the front; the stack never outputs its URL.
	AwaitOriginAPIID   = "AwaitOriginApi"
	AwaitOriginStageID = "AwaitOriginStage"
	// AwaitAPIID is the regional REST API the callers of the token routes
	// use (output AwaitApiUrl), the web ACL's protected resource.
	AwaitAPIID          = "AwaitApi"
	AwaitAPIStageID     = "AwaitApiStage"
	AwaitMethodID       = "AwaitCompleteMethod"
	AwaitValidatorID    = "AwaitRequestValidator"
	AwaitWebACLID       = "AwaitWebAcl"
	AwaitWebACLAssocID  = "AwaitWebAclAssociation"
	awaitRateRuleName   = "await-completion-per-ip"
	awaitBlockedBodyKey = "too-many-requests"
)

// FrontAccessLogFields are the fields of each access log line of the
// await front's REST API (JSON): the request, the caller's IP, the
// outcome, and the web ACL's verdict (wafResponseCode: WAF_ALLOW or
// WAF_BLOCK). No header, query or body is logged: the resume token
// travels in a header.
var FrontAccessLogFields = map[string]string{
	"requestId":          "$context.requestId",
	"requestTime":        "$context.requestTime",
	"sourceIp":           "$context.identity.sourceIp",
	"httpMethod":         "$context.httpMethod",
	"resourcePath":       "$context.resourcePath",
	"status":             "$context.status",
	"protocol":           "$context.protocol",
	"responseLength":     "$context.responseLength",
	"responseLatency":    "$context.responseLatency",
	"integrationStatus":  "$context.integration.status",
	"integrationLatency": "$context.integration.latency",
	"integrationError":   "$context.integration.error",
	"wafResponseCode":    "$context.wafResponseCode",
	"wafError":           "$context.waf.error",
}

// AwaitPathPattern is the regular expression the web ACL's rate rule
// matches a request's URI path with: a token route's path, each path
// parameter one segment, after the stage's segment that API Gateway's
// execute-api endpoint puts first (optional: a custom domain has none).
func AwaitPathPattern(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = "[^/]+"
		} else {
			parts[i] = regexp.QuoteMeta(p)
		}
	}
	return "^(/[^/]+)?" + strings.Join(parts, "/") + "$"
}

// awaitFront serves the token routes (the await completion route) behind
// an AWS WAF web ACL whose rate-based rule limits each client IP, so that
// no single caller can keep the route's throttle spent (Settings.AwaitWAF).
//
// AWS WAF protects REST APIs but not HTTP APIs, and the submit function
// speaks the HTTP API's payload format 2.0 only, so the front is two
// APIs:
//
//   - a regional REST API with the web ACL, the route's throttle
//     (Settings.AwaitThrottleRateLimit), access logs and an HTTP proxy
//     integration that passes method, headers and body through
//     (binaryMediaTypes */*: any payload's bytes unchanged) to
//   - an HTTP API of its own (the origin) holding only the token routes,
//     without an authorizer, integrated with the submit function like
//     the main API's routes and throttled like them. The stack never
//     outputs its URL; the main HTTP API has no token route.
//
// The origin's execute-api URL is not secret from the account's
// principals: whoever learns it reaches the route without the web ACL,
// up to the origin's throttle (docs/deployment.md, "Abuse limits").
func (b *builder) awaitFront() {
	s := b.s
	// The origin.
	origin := awsapigatewayv2.NewHttpApi(b.stack, jsii.String(AwaitOriginAPIID), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(s.Prefix + "-await-origin"),
		Description:        jsii.String("qasync await completion origin (stage " + s.Stage + "): reached through the await front's REST API and its web ACL"),
		CreateDefaultStage: jsii.Bool(false),
	})
	setLogicalID(origin, AwaitOriginAPIID)
	integration := b.submitIntegration("AwaitOriginIntegration")
	var tokenRoutes []tokenRoute
	var paths []Route
	for _, r := range Routes {
		if !r.ResumeToken {
			continue
		}
		route := (*origin.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: integration,
			Authorizer:  awsapigatewayv2.NewHttpNoneAuthorizer(),
		}))[0]
		setLogicalID(route, r.ID)
		tokenRoutes = append(tokenRoutes, tokenRoute{route, r.Key()})
		paths = append(paths, r)
	}
	b.http.tokenRoutes = tokenRoutes
	originLogs := b.logGroup("AwaitOriginAccessLogs", "/aws/apigateway/"+s.Prefix+"-await-origin")
	b.httpStage(origin, AwaitOriginStageID, sharedStage, originLogs, Throttle{s.AwaitThrottleRateLimit, s.AwaitThrottleBurstLimit}, tokenRoutes)

	// The REST API in front.
	format, _ := json.Marshal(FrontAccessLogFields)
	api := awsapigateway.NewRestApi(b.stack, jsii.String(AwaitAPIID), &awsapigateway.RestApiProps{
		RestApiName:   jsii.String(s.Prefix + "-await"),
		Description:   jsii.String("qasync await completion (stage " + s.Stage + "): the resume-token routes behind the web ACL " + s.Prefix + "-await"),
		EndpointTypes: &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		// No account-wide API Gateway CloudWatch role (a singleton of the
		// account and region): the stage keeps access logs only.
		CloudWatchRole:   jsii.Bool(false),
		BinaryMediaTypes: jsii.Strings("*/*"),
		Deploy:           jsii.Bool(true),
		DeployOptions: &awsapigateway.StageOptions{
			StageName:            jsii.String(s.Stage),
			ThrottlingRateLimit:  jsii.Number(s.AwaitThrottleRateLimit),
			ThrottlingBurstLimit: jsii.Number(float64(s.AwaitThrottleBurstLimit)),
			AccessLogDestination: awsapigateway.NewLogGroupLogDestination(b.logGroup("AwaitApiAccessLogs", "/aws/apigateway/"+s.Prefix+"-await")),
			AccessLogFormat:      awsapigateway.AccessLogFormat_Custom(jsii.String(string(format))),
		},
	})
	setLogicalID(api, AwaitAPIID)
	setLogicalID(api.DeploymentStage(), AwaitAPIStageID)
	// Basic validation (cdk-nag's APIG2): the path parameters must be
	// present; no body model is declared, so bodies pass as they are.
	validator := api.AddRequestValidator(jsii.String(AwaitValidatorID), &awsapigateway.RequestValidatorOptions{
		ValidateRequestBody:       jsii.Bool(true),
		ValidateRequestParameters: jsii.Bool(true),
	})
	setLogicalID(validator, AwaitValidatorID)
	var statements []*awswafv2.CfnWebACL_StatementProperty
	for _, r := range paths {
		resource := api.Root()
		methodParams := map[string]*bool{}
		integrationParams := map[string]*string{}
		for _, seg := range strings.Split(strings.TrimPrefix(r.Path, "/"), "/") {
			resource = resource.ResourceForPath(jsii.String(seg))
			if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
				name := seg[1 : len(seg)-1]
				methodParams["method.request.path."+name] = jsii.Bool(true)
				integrationParams["integration.request.path."+name] = jsii.String("method.request.path." + name)
			}
		}
		method := resource.AddMethod(jsii.String(r.Method), awsapigateway.NewHttpIntegration(jsii.String(*origin.ApiEndpoint()+r.Path), &awsapigateway.HttpIntegrationProps{
			HttpMethod: jsii.String(r.Method),
			Proxy:      jsii.Bool(true),
			Options:    &awsapigateway.IntegrationOptions{RequestParameters: &integrationParams},
		}), &awsapigateway.MethodOptions{
			// Authorized by the resume token in the submit function; see
			// Routes.
			AuthorizationType: awsapigateway.AuthorizationType_NONE,
			RequestParameters: &methodParams,
			RequestValidator:  validator,
		})
		setLogicalID(method, AwaitMethodID)
		b.front.methods = append(b.front.methods, method)
		statements = append(statements, &awswafv2.CfnWebACL_StatementProperty{AndStatement: &awswafv2.CfnWebACL_AndStatementProperty{
			Statements: &[]any{
				&awswafv2.CfnWebACL_StatementProperty{ByteMatchStatement: &awswafv2.CfnWebACL_ByteMatchStatementProperty{
					FieldToMatch:         &awswafv2.CfnWebACL_FieldToMatchProperty{Method: map[string]any{}},
					PositionalConstraint: jsii.String("EXACTLY"),
					SearchString:         jsii.String(r.Method),
					TextTransformations:  noTransformation(),
				}},
				&awswafv2.CfnWebACL_StatementProperty{RegexMatchStatement: &awswafv2.CfnWebACL_RegexMatchStatementProperty{
					FieldToMatch:        &awswafv2.CfnWebACL_FieldToMatchProperty{UriPath: map[string]any{}},
					RegexString:         jsii.String(AwaitPathPattern(r.Path)),
					TextTransformations: noTransformation(),
				}},
			},
		}})
	}
	scope := statements[0]
	if len(statements) > 1 {
		either := make([]any, len(statements))
		for i, st := range statements {
			either[i] = st
		}
		scope = &awswafv2.CfnWebACL_StatementProperty{OrStatement: &awswafv2.CfnWebACL_OrStatementProperty{Statements: &either}}
	}
	b.front.api = api

	// The web ACL: requests are allowed unless one IP sent more than
	// AwaitWAFRateLimit completions within the window; those get 429 with
	// Retry-After, like API Gateway's own throttling, until its rate
	// falls below the limit.
	window := strconv.Itoa(int(s.AwaitWAFWindow.Seconds()))
	acl := awswafv2.NewCfnWebACL(b.stack, jsii.String(AwaitWebACLID), &awswafv2.CfnWebACLProps{
		Name:          jsii.String(s.Prefix + "-await"),
		Description:   jsii.String("qasync " + s.Stage + ": per-IP rate limit of await completions"),
		Scope:         jsii.String("REGIONAL"),
		DefaultAction: &awswafv2.CfnWebACL_DefaultActionProperty{Allow: &awswafv2.CfnWebACL_AllowActionProperty{}},
		VisibilityConfig: &awswafv2.CfnWebACL_VisibilityConfigProperty{
			CloudWatchMetricsEnabled: jsii.Bool(true),
			MetricName:               jsii.String(s.Prefix + "-await"),
			SampledRequestsEnabled:   jsii.Bool(true),
		},
		CustomResponseBodies: map[string]any{
			awaitBlockedBodyKey: &awswafv2.CfnWebACL_CustomResponseBodyProperty{
				ContentType: jsii.String("APPLICATION_JSON"),
				Content:     jsii.String(`{"message":"Too Many Requests"}`),
			},
		},
		Rules: &[]any{&awswafv2.CfnWebACL_RuleProperty{
			Name:     jsii.String(awaitRateRuleName),
			Priority: jsii.Number(0),
			Action: &awswafv2.CfnWebACL_RuleActionProperty{Block: &awswafv2.CfnWebACL_BlockActionProperty{
				CustomResponse: &awswafv2.CfnWebACL_CustomResponseProperty{
					ResponseCode:          jsii.Number(429),
					CustomResponseBodyKey: jsii.String(awaitBlockedBodyKey),
					ResponseHeaders: &[]any{&awswafv2.CfnWebACL_CustomHTTPHeaderProperty{
						Name: jsii.String("Retry-After"), Value: jsii.String(window),
					}},
				},
			}},
			Statement: &awswafv2.CfnWebACL_StatementProperty{RateBasedStatement: &awswafv2.CfnWebACL_RateBasedStatementProperty{
				AggregateKeyType:    jsii.String("IP"),
				Limit:               jsii.Number(float64(s.AwaitWAFRateLimit)),
				EvaluationWindowSec: jsii.Number(s.AwaitWAFWindow.Seconds()),
				ScopeDownStatement:  scope,
			}},
			VisibilityConfig: &awswafv2.CfnWebACL_VisibilityConfigProperty{
				CloudWatchMetricsEnabled: jsii.Bool(true),
				MetricName:               jsii.String(s.Prefix + "-" + awaitRateRuleName),
				SampledRequestsEnabled:   jsii.Bool(true),
			},
		}},
	})
	acl.OverrideLogicalId(jsii.String(AwaitWebACLID))
	assoc := awswafv2.NewCfnWebACLAssociation(b.stack, jsii.String(AwaitWebACLAssocID), &awswafv2.CfnWebACLAssociationProps{
		ResourceArn: api.DeploymentStage().StageArn(),
		WebAclArn:   acl.AttrArn(),
	})
	assoc.OverrideLogicalId(jsii.String(AwaitWebACLAssocID))
	// The stage's ARN is built from its name, not a reference to it: the
	// association must wait for the stage.
	assoc.Node().AddDependency(api.DeploymentStage())
}

// noTransformation is a WAF match's text transformations: none.
func noTransformation() *[]any {
	return &[]any{&awswafv2.CfnWebACL_TextTransformationProperty{Priority: jsii.Number(0), Type: jsii.String("NONE")}}
}

// awaitFrontAPI is the REST API of the await front and its methods (nil
// without Settings.AwaitWAF).
type awaitFrontAPI struct {
	api     awsapigateway.RestApi
	methods []awsapigateway.Method
}
