// Package models validates and converts payloads against schemas: JSON
// Schema, Avro and Protobuf, with schemas inline, from files, or from a
// Confluent-compatible Schema Registry, and simple text types (string with
// length and pattern, int32, int64, float, double, boolean, bytes).
//
// A Catalog supplies schema texts (Static for inline and filesystem
// catalogs, Registry for a registry). A Model, built from a Config, checks
// values on their way into Kafka (Encode) and out of it (Decode): without a
// view it validates and passes bytes unchanged; with view "json" it
// converts JSON to the model's binary format, in the registry wire format
// when the model frames (magic byte 0, big-endian schema id, Protobuf
// message indexes), and back.
//
// Refusals are *Error values of three kinds, each with the HTTP status the
// processor answers: KindParse (400), KindInvalid (422, every violation as
// a JSON pointer and a reason, rendered by Error.Problem in RFC 9457's
// `errors` shape) and KindUnavailable (503). A schema that does not compile
// is a *SchemaError, with a line and column when the schema language gives
// one.
//
// The processor applies models per topic (the kafka binding's
// options.topics): README.md lists where, and what remains.
package models
