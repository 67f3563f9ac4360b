"""HTTP and WebSocket routers."""
