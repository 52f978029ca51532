; Shadow-engine queries for Java (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(character_literal) @skip
(line_comment) @skip
(block_comment) @skip

(class_declaration) @construct
(interface_declaration) @construct
(method_declaration) @construct
(if_statement) @construct
(for_statement) @construct
(while_statement) @construct
(switch_expression) @construct
(method_invocation) @construct
