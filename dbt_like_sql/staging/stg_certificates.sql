-- Current state of every certificate (from the webhook deliveries), with its badge flattened.
with

source as (

    select * from {{ source('lms', 'certificates') }}

),

renamed as (

    select
        id as certificate_id,
        user_id,
        owner_id,
        badge_id,
        rule_data_name as badge_name,
        rule_data_type as badge_rule_type,
        rule_data_validity_duration_days as validity_duration_days,
        creation_date as completed_at,
        expires as expires_at,
        coalesce(disabled, false) as is_disabled,
        expiry_reminder_sent,
        updated_at,
        last_event_type,
        last_received_at

    from source

)

select * from renamed
