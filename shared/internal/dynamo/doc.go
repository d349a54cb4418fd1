// Package dynamo is the DynamoDB provider: the state store
// (NewStateStore), the payload store (NewPayloadStore), the effect log
// (NewEffects) and the dead-letter recorder (NewDeadLetters), laid out as
// package schema defines. Every adapter passes the suites of package
// backendtest against DynamoDB Local (TestConformance).
package dynamo
