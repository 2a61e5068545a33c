-- 0011 downgrade: drop the session-service functions, then their storage.
drop function if exists membank.create_session(text, text, text, jsonb);
drop function if exists membank.get_session(text, text, text, integer, double precision);
drop function if exists membank.list_sessions(text, text);
drop function if exists membank.delete_session(text, text, text);
drop function if exists membank.append_session_event(text, text, text, jsonb);
drop function if exists membank.get_user_state(text, text);
drop function if exists membank_private.session_json(membank_private.sessions, boolean, integer, double precision);
drop function if exists membank_private.validate_session_ids(text, text, text);
drop function if exists membank_private.merge_shared_state(text, uuid, jsonb, jsonb);
drop function if exists membank_private.split_state(jsonb, text);
drop index if exists membank_private.sessions_app_name_idx;
drop table if exists membank_private.app_states;
drop table if exists membank_private.scope_states;
alter table membank_private.events drop column if exists payload;
alter table membank_private.sessions drop column if exists state;
