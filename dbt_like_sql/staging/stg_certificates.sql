-- Current state of every certificate (from the webhook deliveries), with its badge flattened.
SELECT
    id AS certificate_id,
    user_id,
    owner_id,
    badge_id,
    rule_data_name AS badge_name,
    rule_data_type AS badge_rule_type,
    rule_data_validity_duration_days AS validity_duration_days,
    creation_date AS completed_at,
    expires AS expires_at,
    coalesce(disabled, FALSE) AS is_disabled,
    expiry_reminder_sent,
    updated_at,
    last_event_type,
    last_received_at
FROM lms.certificates
