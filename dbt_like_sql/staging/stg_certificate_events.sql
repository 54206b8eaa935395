-- Every distinct certificate delivery (completed or expired), in the order it was received.
with

source as (

    select * from {{ source('lms', 'certificate_events') }}

),

renamed as (

    select
        event_id,
        inbox_id,
        sequence,
        event_type,
        received_at,
        source as sender,
        id as certificate_id,
        user_id,
        badge_id,
        creation_date as completed_at,
        expires as expires_at,
        updated_at

    from source

)

select * from renamed
