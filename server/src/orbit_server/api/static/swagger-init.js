// Starts Swagger UI on the page that orbit_server/api/openapi_ui.py serves. The page names the
// OpenAPI document in a data attribute, so it needs no inline script.
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    deepLinking: true,
    displayOperationId: true,
    // Swagger UI would send the document to swagger.io's online validator.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
})();
