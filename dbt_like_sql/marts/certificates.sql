-- Certificates: one row per certificate with its state on the build's reference instant `as_of`
-- (getvariable('as_of'), the build time unless pinned):
--   revoked   disabled
--   expired   not disabled, expires_at <= as_of
--   active    not disabled, no expiry or expires_at > as_of
-- expiring_within_30_days: active and expires_at <= as_of + 30 days.
SELECT
    c.certificate_id,
    c.user_id,
    c.badge_id,
    c.badge_name,
    c.completed_at,
    c.expires_at,
    CASE
        WHEN c.is_disabled THEN 'revoked'
        WHEN c.expires_at <= getvariable('as_of') THEN 'expired'
        ELSE 'active'
    END AS state,
    coalesce(NOT c.is_disabled AND c.expires_at > getvariable('as_of')
        AND c.expires_at <= getvariable('as_of') + INTERVAL 30 DAY, FALSE) AS expiring_within_30_days,
    getvariable('as_of') AS as_of
FROM analytics.stg_certificates AS c
