"""The control API's routes, one module per noun: a handler object over its services and the table
(``table.Route``) that maps method + path to its handlers. Handlers parse, call a service and render;
``openapi`` and ``answers`` tell the document what they answer. Nothing here runs SQL."""
