; Shadow-engine queries for TSX (see grammars/python/shadow.scm for the captures).
(string) @skip
(template_string) @skip
(comment) @skip

(function_declaration) @construct
(class_declaration) @construct
(interface_declaration) @construct
(method_definition) @construct
(arrow_function) @construct
(if_statement) @construct
(for_statement) @construct
(while_statement) @construct
(object) @construct
(array) @construct
(call_expression) @construct
