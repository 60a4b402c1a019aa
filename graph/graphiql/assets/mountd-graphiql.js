// Starts GraphiQL on this server's /graphql over HTTP and WebSocket. The
// Access-Key header is prefilled empty so that a person sees where the
// token goes; the headers are sent with every request and, for
// subscriptions, in the connection_init payload.
(function () {
  'use strict';
  var wsProtocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  var base = GraphiQL.createFetcher({
    url: location.protocol + '//' + location.host + '/graphql',
    subscriptionUrl: wsProtocol + '//' + location.host + '/graphql',
  });

  // A person signed in to the console in this tab brings the token along
  // (same origin, the console's sessionStorage, read afresh each time so
  // that a sign-out or a refresh is seen).
  function consoleToken() {
    try {
      var t = JSON.parse(sessionStorage.getItem('tokens') || 'null');
      if (t && t.access && t.expires > Date.now()) return t.access;
    } catch (e) {}
    return null;
  }

  // GraphiQL asks for the schema before its headers editor exists, without
  // headers: a request that names no token gets the console's, so the page
  // opens with the schema rather than on a 401.
  function fetcher(params, opts) {
    var token = consoleToken();
    var headers = (opts && opts.headers) || {};
    var named = Object.keys(headers).some(function (k) {
      var name = k.toLowerCase();
      return (name === 'access-key' || name === 'authorization') && headers[k];
    });
    if (token && !named) {
      opts = Object.assign({}, opts, { headers: Object.assign({}, headers, { 'Access-Key': token }) });
    }
    return base(params, opts);
  }

  var token = consoleToken();
  var root = ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultHeaders: JSON.stringify({ 'Access-Key': '' }, null, 2),
      headers: token ? JSON.stringify({ 'Access-Key': token }, null, 2) : undefined,
      isHeadersEditorEnabled: true,
      defaultEditorToolsVisibility: 'headers',
      // Headers hold tokens: never kept in localStorage, which outlives the
      // console's sign-in (GraphiQL then also clears what it kept there).
      shouldPersistHeaders: false,
      inputValueDeprecation: true,
    }),
  );
})();
