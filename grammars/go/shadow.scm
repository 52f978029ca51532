; Shadow-engine queries for Go (see grammars/python/shadow.scm for the captures).
(interpreted_string_literal) @skip
(raw_string_literal) @skip
(rune_literal) @skip
(comment) @skip

(function_declaration) @construct
(method_declaration) @construct
(func_literal) @construct
(if_statement) @construct
(for_statement) @construct
(expression_switch_statement) @construct
(type_declaration) @construct
(composite_literal) @construct
(call_expression) @construct
