; Shadow-engine queries for Rust (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(raw_string_literal) @skip
(char_literal) @skip
(line_comment) @skip
(block_comment) @skip

(function_item) @construct
(impl_item) @construct
(struct_item) @construct
(enum_item) @construct
(if_expression) @construct
(for_expression) @construct
(while_expression) @construct
(match_expression) @construct
(call_expression) @construct
