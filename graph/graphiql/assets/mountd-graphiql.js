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
  // A person signed in to the console in this tab brings the token along
  // (same origin, the console's sessionStorage).
  var consoleToken = null;
  try {
    var t = JSON.parse(sessionStorage.getItem('tokens') || 'null');
    if (t && t.access && t.expires > Date.now()) consoleToken = t.access;
  } catch (e) {}
  var root = ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultHeaders: JSON.stringify({ 'Access-Key': '' }, null, 2),
      headers: consoleToken ? JSON.stringify({ 'Access-Key': consoleToken }, null, 2) : undefined,
      isHeadersEditorEnabled: true,
      defaultEditorToolsVisibility: 'headers',
      shouldPersistHeaders: true,
      inputValueDeprecation: true,
    }),
  );
})();
