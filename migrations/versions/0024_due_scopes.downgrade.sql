drop table membank_private.due_scopes;
