// Starts GraphiQL on this server's /graphql over HTTP and WebSocket. The
// Access-Key header is prefilled empty so that a person sees where the
// token goes; the headers are sent with every request and, for
// subscriptions, in the connection_init payload.
(function () {
  'use strict';
  var wsProtocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  var fetcher = GraphiQL.createFetcher({
    url: location.protocol + '//' + location.host + '/graphql',
    subscriptionUrl: wsProtocol + '//' + location.host + '/graphql',
  });
  var root = ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultHeaders: JSON.stringify({ 'Access-Key': '' }, null, 2),
      isHeadersEditorEnabled: true,
      defaultEditorToolsVisibility: 'headers',
      shouldPersistHeaders: true,
      inputValueDeprecation: true,
    }),
  );
})();
