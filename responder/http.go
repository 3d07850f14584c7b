package responder

import (
	"context"
	"encoding/json"
	"strconv"
)

// HTTPReply is the reply record of an http-kafka request: the status in
// `:status`, the response headers, and the body as the value.
func HTTPReply(status int, body []byte, headers ...Header) Reply {
	hs := make([]Header, 0, len(headers)+1)
	hs = append(hs, Header{Key: ":status", Value: []byte(strconv.Itoa(status))})
	hs = append(hs, headers...)
	if body == nil {
		body = []byte{}
	}
	return Reply{Headers: hs, Value: body}
}

// HTTPEcho answers every http-kafka request with `:status` 201 for a POST
// (200 otherwise), content-type application/json and a JSON body echoing
// the request:
//
//	{"method":"POST","path":"/orders/1","key":"1","body":{"qty":1}}
//
// body is the request body as JSON when it is JSON, else as a string (null
// for a null value).
func HTTPEcho() Handler {
	return func(_ context.Context, req *Request) ([]Reply, error) {
		method, _ := req.Header(":method")
		echo := struct {
			Method string          `json:"method"`
			Path   string          `json:"path"`
			Key    *string         `json:"key"`
			Body   json.RawMessage `json:"body"`
		}{Method: method, Body: json.RawMessage("null")}
		echo.Path, _ = req.Header(":path")
		if req.Key != nil {
			k := string(req.Key)
			echo.Key = &k
		}
		switch {
		case req.Value == nil:
		case json.Valid(req.Value):
			echo.Body = req.Value
		default:
			s, _ := json.Marshal(string(req.Value)) // cannot fail: a string
			echo.Body = s
		}
		body, err := json.Marshal(echo)
		if err != nil {
			return nil, err
		}
		status := 200
		if method == "POST" {
			status = 201
		}
		return []Reply{HTTPReply(status, body, Header{Key: "content-type", Value: []byte("application/json")})}, nil
	}
}
