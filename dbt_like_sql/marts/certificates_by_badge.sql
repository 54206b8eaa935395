-- Certificates per badge on the build's reference instant (see certificates.sql for the states):
-- certificates = active + expired + revoked; expiring_within_30_days is a part of active.
SELECT
    badge_id,
    any_value(badge_name ORDER BY completed_at DESC) AS badge_name,
    count(*) AS certificates,
    count(*) FILTER (WHERE state = 'active') AS active,
    count(*) FILTER (WHERE expiring_within_30_days) AS expiring_within_30_days,
    count(*) FILTER (WHERE state = 'expired') AS expired,
    count(*) FILTER (WHERE state = 'revoked') AS revoked,
    any_value(as_of) AS as_of
FROM analytics.certificates
GROUP BY badge_id
