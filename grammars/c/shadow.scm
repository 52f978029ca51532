; Shadow-engine queries for C (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(char_literal) @skip
(system_lib_string) @skip
(comment) @skip

(function_definition) @construct
(struct_specifier) @construct
(if_statement) @construct
(for_statement) @construct
(while_statement) @construct
(switch_statement) @construct
(initializer_list) @construct
(call_expression) @construct
