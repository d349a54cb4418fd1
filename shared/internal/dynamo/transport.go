package dynamo

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// unreachable reports whether err is a transport failure, which the SDK
// has already retried: the request could not be sent or its answer not
// read (nothing listening on the endpoint, a connection refused or reset,
// a name that does not resolve, an I/O timeout), rather than an answer
// from DynamoDB. The end of the caller's own context is not one: it stays
// a context error.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var send *smithyhttp.RequestSendError
	var op *net.OpError
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &send), errors.As(err, &op), errors.As(err, &dns):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	}
	return false
}
