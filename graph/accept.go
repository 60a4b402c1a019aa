package graph

import "github.com/coder/websocket"

func acceptOptions(origins []string) websocket.AcceptOptions {
	return websocket.AcceptOptions{
		Subprotocols:   []string{"graphql-transport-ws", "graphql-ws"},
		OriginPatterns: origins,
	}
}
