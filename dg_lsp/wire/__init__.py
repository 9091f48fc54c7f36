"""The wire, ours alone (no pygls on the request path): bytes -> frames (framing) -> JSON-RPC messages
(jsonrpc) -> the message loop (transport, over stdio or tcp) -> dispatch (the lifecycle's gate, params,
the handler, in arrival order; fastparams builds a keystroke's params without cattrs); outgoing writes
answers, notifications and the server's own requests; capabilities is the initialize answer. Nothing here
knows what a fill is."""
