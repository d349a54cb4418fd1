package localcloud

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// Caller is an IAM principal that may call the emulated API's AWS_IAM
// routes.
type Caller struct {
	// AccessKeyID and SecretAccessKey are the credentials it signs with.
	AccessKeyID, SecretAccessKey string
	// ARN is its userArn, e.g. arn:aws:iam::000000000000:user/alice or
	// an assumed-role ARN (arn:aws:sts::...:assumed-role/Role/session).
	ARN string
	// Policy is what it may invoke (execute-api:Invoke on the route's
	// ARN); nil allows everything (no execute-api check).
	Policy *iamcheck.Policy
}

// The SigV4 settings of API Gateway's invoke API.
const (
	signingService = "execute-api"
	signingAlgo    = "AWS4-HMAC-SHA256"
	amzDateFormat  = "20060102T150405Z"
	// MaxSignatureSkew is how far from the front's clock a request's
	// X-Amz-Date may be, as on AWS.
	MaxSignatureSkew = 5 * time.Minute
)

// Answers of API Gateway to a request it refuses on an AWS_IAM route
// (status 403, the message in {"message": ...}, the error type in
// x-amzn-ErrorType).
const (
	msgForbidden        = "Forbidden"
	msgBadSignature     = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	msgUnknownKey       = "The security token included in the request is invalid."
	errTypeForbidden    = "ForbiddenException"
	errTypeBadSignature = "InvalidSignatureException"
	errTypeIncomplete   = "IncompleteSignatureException"
	errTypeUnknownKey   = "UnrecognizedClientException"
)

// callers indexes Options.Callers by access key id.
type callers map[string]*callerInfo

// callerInfo is a validated Caller with its authorizer identity.
type callerInfo struct {
	Caller
	iam events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription
}

// newCallers validates the callers.
func newCallers(cs []Caller) (callers, error) {
	out := callers{}
	for _, c := range cs {
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return nil, fmt.Errorf("localcloud: caller %q: AccessKeyID and SecretAccessKey are required", c.ARN)
		}
		if _, dup := out[c.AccessKeyID]; dup {
			return nil, fmt.Errorf("localcloud: caller %q: access key id %s is another caller's", c.ARN, c.AccessKeyID)
		}
		iam, err := callerIdentity(c)
		if err != nil {
			return nil, err
		}
		out[c.AccessKeyID] = &callerInfo{Caller: c, iam: iam}
	}
	return out, nil
}

// callerIdentity is requestContext.authorizer.iam of a caller. IAM's
// unique ids are not known here: userId is derived from the ARN, in
// IAM's shape (AIDA... for a user, AROA...:<session> for an assumed
// role), stable across runs.
func callerIdentity(c Caller) (events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription, error) {
	var none events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription
	a, err := arn.Parse(c.ARN)
	if err != nil || (a.Service != "iam" && a.Service != "sts") || len(a.AccountID) != 12 || a.Resource == "" {
		return none, fmt.Errorf("localcloud: caller %q: ARN must be an IAM principal's (arn:aws:iam::<account>:user/<name>, :role/<name>, or arn:aws:sts::<account>:assumed-role/<role>/<session>)", c.ARN)
	}
	sum := sha256.Sum256([]byte(c.ARN))
	uid := strings.ToUpper(hex.EncodeToString(sum[:9]))
	userID := "AIDA" + uid
	if kind, rest, _ := strings.Cut(a.Resource, "/"); kind == "assumed-role" {
		_, session, ok := strings.Cut(rest, "/")
		if !ok || session == "" {
			return none, fmt.Errorf("localcloud: caller %q: an assumed-role ARN names the role and the session", c.ARN)
		}
		userID = "AROA" + uid + ":" + session
	} else if kind == "role" {
		userID = "AROA" + uid
	}
	return events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
		AccessKey: c.AccessKeyID,
		AccountID: a.AccountID,
		CallerID:  userID,
		UserARN:   c.ARN,
		UserID:    userID,
	}, nil
}

// authFailure is why an AWS_IAM route refused a request: the answer and
// the reason logged.
type authFailure struct {
	message, errType, reason string
	caller                   *callerInfo // when the signature named a known caller
}

// sigV4Header is the parsed Authorization header of a signed request.
type sigV4Header struct {
	accessKeyID, date, region, service string
	signedHeaders                      []string
	signature                          string
}

// parseAuthorization parses "AWS4-HMAC-SHA256 Credential=<key>/<date>/
// <region>/<service>/aws4_request, SignedHeaders=a;b, Signature=<hex>".
// It returns the message of IncompleteSignatureException when a part is
// missing.
func parseAuthorization(h string) (sigV4Header, string) {
	var s sigV4Header
	algo, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
	if algo != signingAlgo {
		return s, "Authorization header requires the " + signingAlgo + " algorithm."
	}
	var cred, signed string
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			s.signature = v
		}
	}
	var missing []string
	for _, p := range []struct{ name, v string }{{"Credential", cred}, {"Signature", s.signature}, {"SignedHeaders", signed}} {
		if p.v == "" {
			missing = append(missing, "Authorization header requires '"+p.name+"' parameter.")
		}
	}
	if len(missing) > 0 {
		return s, strings.Join(missing, " ")
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return s, "Credential should be scoped to a valid region, service and date (<key>/<date>/<region>/<service>/aws4_request)."
	}
	s.accessKeyID, s.date, s.region, s.service = scope[0], scope[1], scope[2], scope[3]
	s.signedHeaders = strings.Split(signed, ";")
	return s, ""
}

// authenticate verifies the SigV4 signature of a request to an AWS_IAM
// route (header form: an Authorization header and X-Amz-Date; a
// presigned query string is not supported and counts as unsigned) and
// returns its caller. The signature is recomputed with the AWS SDK's v4
// signer over the received request (its method, path, query, the headers
// it signed, X-Amz-Date, the payload's SHA-256) with the caller's secret,
// and compared in constant time. now is the front's clock.
func (c callers) authenticate(r *http.Request, body []byte, region string, now time.Time) (*callerInfo, *authFailure) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, &authFailure{message: msgForbidden, errType: errTypeForbidden, reason: "missing_signature"}
	}
	sig, incomplete := parseAuthorization(h)
	if incomplete == "" && r.Header.Get("X-Amz-Date") == "" {
		incomplete = "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
	}
	if incomplete != "" {
		return nil, &authFailure{message: incomplete, errType: errTypeIncomplete, reason: "incomplete_signature"}
	}
	ci := c[sig.accessKeyID]
	if ci == nil {
		return nil, &authFailure{message: msgUnknownKey, errType: errTypeUnknownKey, reason: "unknown_access_key"}
	}
	bad := &authFailure{message: msgBadSignature, errType: errTypeBadSignature, reason: "signature_mismatch", caller: ci}
	amzDate := r.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse(amzDateFormat, amzDate)
	if err != nil || sig.date != signedAt.Format("20060102") || sig.service != signingService || sig.region != region {
		return nil, bad
	}
	if d := now.Sub(signedAt); d > MaxSignatureSkew || d < -MaxSignatureSkew {
		limit := now.Add(-MaxSignatureSkew)
		msg := fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
			amzDate, limit.UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat))
		if d < 0 {
			msg = fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
				amzDate, now.Add(MaxSignatureSkew).UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat))
		}
		return nil, &authFailure{message: msg, errType: errTypeBadSignature, reason: "signature_expired", caller: ci}
	}

	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if claimed := r.Header.Get("X-Amz-Content-Sha256"); claimed != "" && claimed != payloadHash {
		// A body that is not the one signed (or UNSIGNED-PAYLOAD, which
		// execute-api does not take).
		return nil, bad
	}
	// The request as signed: only the headers it names (host and
	// content-length are the signer's own), so that the signer signs the
	// same set.
	clone, err := http.NewRequestWithContext(context.Background(), r.Method, r.URL.String(), nil)
	if err != nil {
		return nil, bad
	}
	clone.URL.RawPath = r.URL.RawPath
	clone.Host = r.Host
	for _, name := range sig.signedHeaders {
		switch name {
		case "host", "x-amz-date":
		case "content-length":
			clone.ContentLength = int64(len(body))
		default:
			if vs := r.Header.Values(name); len(vs) > 0 {
				clone.Header[http.CanonicalHeaderKey(name)] = vs
			}
		}
	}
	creds := aws.Credentials{AccessKeyID: ci.AccessKeyID, SecretAccessKey: ci.SecretAccessKey}
	signer := v4.NewSigner()
	if err := signer.SignHTTP(context.Background(), creds, clone, payloadHash, signingService, region, signedAt); err != nil {
		return nil, bad
	}
	want, _ := parseAuthorization(clone.Header.Get("Authorization"))
	if strings.Join(want.signedHeaders, ";") != strings.Join(sig.signedHeaders, ";") ||
		subtle.ConstantTimeCompare([]byte(want.signature), []byte(sig.signature)) != 1 {
		return nil, bad
	}
	return ci, nil
}

// invokeARN is the execute-api ARN a request to the $default stage
// invokes: arn:<partition>:execute-api:<region>:<account>:<apiId>/
// $default/<METHOD>/<path without its leading slash>.
func invokeARN(region, accountID, apiID, method, path string) string {
	return fmt.Sprintf("arn:%s:execute-api:%s:%s:%s/$default/%s/%s", partitionOf(region), region, accountID, apiID, method, strings.TrimPrefix(path, "/"))
}

// partitionOf is the AWS partition of a region.
func partitionOf(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}
